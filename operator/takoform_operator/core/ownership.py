"""Who owns a host resource: at most one CR in the whole cluster (brief section 9).

A host resource is named by its `Identity` (host, space, Form line, name). Every CR that names an
identity is a `Claimant` of it; a claimant has *claimed* it once its status records the target,
which the operator writes before anything is sent to the host. The owner is decided from these
persisted facts alone, the same way by every process and after every restart:

1. a claimant that has claimed always wins over one that has not (what was sent stays owned);
2. among equals, the oldest CR wins: creationTimestamp, then namespace, then name, then uid.

Rule 2 makes the outcome independent of the order in which reconciles run: two CRs created in
the same instant get the same owner whichever is reconciled first, and a process that restarts
before either claim was written decides the same way again. Pure: no kopf, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from takoform_spec.identity import FormLine

from .tenancy import DEFAULT_HOST


@dataclass(frozen=True, order=True)
class Identity:
    """A host resource as ownership sees it: never two CRs for one of these."""

    space: str
    line: FormLine
    name: str
    #: The TakoformHost the resource lives on (the same name on two hosts is two resources).
    host: str = DEFAULT_HOST

    def __str__(self) -> str:
        return f"{self.line} {self.name!r} in space {self.space!r} on host {self.host!r}"


@dataclass(frozen=True)
class Claimant:
    """One CR naming an identity, with the facts the tie-break reads."""

    uid: str
    namespace: str
    name: str
    #: metadata.creationTimestamp as RFC 3339 (UTC, 'Z'): compares correctly as text.
    created: str
    #: The CR's status records this identity as its target: something may have been sent.
    claimed: bool

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    def _rank(self) -> tuple[bool, str, str, str, str]:
        return (not self.claimed, self.created, self.namespace, self.name, self.uid)


def owner(claimants: Iterable[Claimant]) -> Claimant | None:
    """The one claimant that owns the identity, or None when nobody names it."""
    return min(claimants, key=Claimant._rank, default=None)
