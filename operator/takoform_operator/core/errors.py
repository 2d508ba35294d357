"""Errors of the pure core, written out once as a tree.

    TakoformError
    ├── InvalidIdentity          a value of the 0011 vocabulary is malformed
    │   ├── InvalidSpaceId
    │   ├── InvalidName
    │   └── InvalidImportId      0017 rule 5: says what is wrong and what a valid id looks like
    ├── CatalogError             a Form Definition file is malformed
    │   └── CompatibilityError   a "minor" that removes, retypes or re-means a field
    ├── UnknownFormRef           0017 rule 4: state bound to a ref the build cannot decode
    └── CodecError               a document does not fit the exact definition's field set
        ├── UndeclaredField
        ├── MissingRequiredField
        └── WrongFieldType       (also: a value outside the field's constraints)

Callers match on types and on the attributes, never on message text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .identity import FormRef


class TakoformError(Exception):
    """Root of every error the core raises."""


class InvalidIdentity(TakoformError, ValueError):
    pass


class InvalidSpaceId(InvalidIdentity):
    pass


class InvalidName(InvalidIdentity):
    pass


class InvalidImportId(InvalidIdentity):
    pass


class CatalogError(TakoformError):
    pass


class CompatibilityError(CatalogError):
    """A minor version broke the Form compatibility rule."""

    def __init__(self, line: str, older: str, newer: str, field: str, problem: str) -> None:
        self.line, self.older, self.newer, self.field = line, older, newer, field
        super().__init__(
            f"{line}: definitionVersion {newer} is a minor of {older} but field {field!r} "
            f"{problem}; an additive minor may only add optional fields — make it a new major"
        )


class UnknownFormRef(TakoformError):
    """Fail closed (0017 rule 4): names the recorded ref and every ref of its kind we know."""

    def __init__(self, recorded: FormRef, known: list[FormRef]) -> None:
        self.recorded = recorded
        self.known = sorted(known)
        listing = "\n".join(f"  - {ref}" for ref in self.known) or "  (none)"
        super().__init__(
            f"state is bound to FormRef {recorded}, which this build cannot decode; refusing to "
            f"read, update or delete it under any other FormRef. FormRefs of "
            f"{recorded.api_version} {recorded.kind} this build knows:\n{listing}"
        )


class CodecError(TakoformError):
    def __init__(self, ref: FormRef, field: str, problem: str) -> None:
        self.ref, self.field = ref, field
        super().__init__(f"field {field!r} {problem} (FormRef {ref})")


class UndeclaredField(CodecError):
    pass


class MissingRequiredField(CodecError):
    pass


class WrongFieldType(CodecError):
    pass
