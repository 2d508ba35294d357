"""Errors of the shared vocabulary, written out once as a tree.

    TakoformError                the root of every error the project's pure code raises
    ├── InvalidIdentity          a value of the 0011 vocabulary is malformed
    │   ├── InvalidSpaceId
    │   └── InvalidName
    └── CatalogError             a Form Definition file is malformed
        └── CompatibilityError   a "minor" that removes, retypes or re-means a field

The operator's core extends the tree (`takoform_operator.core.errors`). Callers match on types and
on the attributes, never on message text.
"""

from __future__ import annotations


class TakoformError(Exception):
    """Root of every error the shared vocabulary and the operator's core raise."""


class InvalidIdentity(TakoformError, ValueError):
    pass


class InvalidSpaceId(InvalidIdentity):
    pass


class InvalidName(InvalidIdentity):
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
