"""Errors of the operator's pure core, written out once as a tree.

    TakoformError                (takoform_spec.errors: the root, identity and catalog errors)
    ├── InvalidIdentity          (takoform_spec.errors)
    │   └── InvalidImportId      0017 rule 5: says what is wrong and what a valid id looks like
    ├── UnknownFormRef           0017 rule 4: state bound to a ref the build cannot decode
    └── CodecError               a document does not fit the exact definition's field set
        ├── UndeclaredField
        ├── MissingRequiredField
        └── WrongFieldType       (also: a value outside the field's constraints)

Callers match on types and on the attributes, never on message text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from takoform_spec.errors import InvalidIdentity, TakoformError

if TYPE_CHECKING:
    from takoform_spec.identity import FormRef


class InvalidImportId(InvalidIdentity):
    pass


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
