"""The decision tables of decision 0017 rules 6 and 7, written out row by row.

They answer one question: given what a single consultation of the pending operation said and what
the exact resource GET found, what may the read conclude? Keeping them as data makes every
combination visible and testable (tests/unit/test_tables.py walks each row).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .state import OpState, ResourceView


class Presence(StrEnum):
    """What the exact resource GET found, judged against the uid state expects (rule 6)."""

    ABSENT = "absent"
    SAME_UID = "same-uid"
    DIFFERENT_UID = "different-uid"
    #: Present, but state knows no uid to compare with: adopted only on proof of ownership.
    UNKNOWN_UID = "unknown-uid"


class Conclusion(StrEnum):
    #: Absence is NOT deletion: nothing committed yet. Keep state and look again.
    WAIT = "wait"
    #: The exact resource is ours (uid verified): settle state from it.
    SETTLE = "settle"
    #: The resource is gone: state may be removed (or, being deleted, the CR released).
    GONE = "gone"
    #: Another incarnation sits under the name: Blocked, state kept.
    BLOCK = "block"
    #: A uid nobody recorded: adopted only with proof (our idempotency key on it).
    ADOPT_IF_PROVEN = "adopt-if-proven"


class Marker(StrEnum):
    """What happens to pendingOperationId: cleared only by an operation that actually settled."""

    KEEP = "keep"
    CLEAR = "clear"


@dataclass(frozen=True)
class Row:
    """One row of a rule 7 table: the conclusion, the marker, and whether the next mutation
    needs a fresh attempt (a new idempotency key) because this operation's key is spent."""

    conclusion: Conclusion
    marker: Marker
    fresh_attempt: bool = False


def presence(resource: ResourceView | None, expected_uid: str | None) -> Presence:
    """Rule 6: a known uid is verified in every branch; an unknown one is never assumed."""
    if resource is None:
        return Presence.ABSENT
    if expected_uid is None:
        return Presence.UNKNOWN_UID
    return Presence.SAME_UID if resource.uid == expected_uid else Presence.DIFFERENT_UID


_R, _S, _F, _N = OpState.RUNNING, OpState.SUCCEEDED, OpState.FAILED, OpState.NOT_FOUND
_A, _SAME, _DIFF, _UNK = (
    Presence.ABSENT,
    Presence.SAME_UID,
    Presence.DIFFERENT_UID,
    Presence.UNKNOWN_UID,
)
C, KEEP, CLEAR, FRESH = Conclusion, Marker.KEEP, Marker.CLEAR, True

#: Rule 7 for a pending CREATE or UPDATE: (operation state, presence) -> row.
MUTATION_TABLE: dict[tuple[OpState, Presence], Row] = {
    # still running: absence is not deletion; a readable representation settles, marker survives
    (_R, _A): Row(C.WAIT, KEEP),
    (_R, _SAME): Row(C.SETTLE, KEEP),
    (_R, _DIFF): Row(C.BLOCK, KEEP),
    (_R, _UNK): Row(C.ADOPT_IF_PROVEN, KEEP),
    # terminal success: the result is verified against the exact identity and its uid checked;
    # committed, then removed by someone else: drift (a new create needs a new key)
    (_S, _A): Row(C.GONE, CLEAR, FRESH),
    (_S, _SAME): Row(C.SETTLE, CLEAR),
    (_S, _DIFF): Row(C.BLOCK, CLEAR),
    (_S, _UNK): Row(C.ADOPT_IF_PROVEN, CLEAR),
    # terminal error: the exact GET is the final word; absent -> removable, present -> uid
    # decides; the failed operation's key is spent, so whatever follows needs a fresh attempt
    (_F, _A): Row(C.GONE, CLEAR, FRESH),
    (_F, _SAME): Row(C.SETTLE, CLEAR, FRESH),
    (_F, _DIFF): Row(C.BLOCK, CLEAR, FRESH),
    (_F, _UNK): Row(C.ADOPT_IF_PROVEN, CLEAR, FRESH),
    # record expired: the exact GET is the final word, under the same uid rule; its key may
    # outlive the record on the host (replayed as the expired operation), so it is spent
    (_N, _A): Row(C.GONE, CLEAR, FRESH),
    (_N, _SAME): Row(C.SETTLE, CLEAR, FRESH),
    (_N, _DIFF): Row(C.BLOCK, CLEAR, FRESH),
    (_N, _UNK): Row(C.ADOPT_IF_PROVEN, CLEAR, FRESH),
}

#: Rule 7 for a pending DELETE. Absence or another incarnation means OUR incarnation is gone;
#: the replacement is never touched (deletes always carry the expected uid).
DELETE_TABLE: dict[tuple[OpState, Presence], Row] = {
    (_R, _A): Row(C.WAIT, KEEP),  # not committed: may be mid-delete; never conclude early
    (_R, _SAME): Row(C.SETTLE, KEEP),
    (_R, _DIFF): Row(C.BLOCK, KEEP),
    (_R, _UNK): Row(C.WAIT, KEEP),
    (_S, _A): Row(C.GONE, CLEAR),
    (_S, _SAME): Row(C.SETTLE, CLEAR, FRESH),  # host says done yet it is there: delete again
    (_S, _DIFF): Row(C.GONE, CLEAR),  # ours was deleted; the replacement is not ours to touch
    (_S, _UNK): Row(C.GONE, CLEAR),
    (_F, _A): Row(C.GONE, CLEAR),
    (_F, _SAME): Row(C.SETTLE, CLEAR, FRESH),  # still there: keep state, retry with a new key
    (_F, _DIFF): Row(C.BLOCK, CLEAR, FRESH),
    (_F, _UNK): Row(C.BLOCK, CLEAR, FRESH),
    (_N, _A): Row(C.GONE, CLEAR, FRESH),
    (_N, _SAME): Row(C.SETTLE, CLEAR, FRESH),
    (_N, _DIFF): Row(C.BLOCK, CLEAR, FRESH),
    (_N, _UNK): Row(C.BLOCK, CLEAR, FRESH),
}


class UidRule(StrEnum):
    """Rule 6 outside a pending operation, with the three ways out of Blocked."""

    MATCH = "match"  # the recorded incarnation (or the prior one restored): carry on
    ACCEPTED = "accepted"  # the user explicitly imported the new incarnation: rebind to it
    BLOCKED = "blocked"  # another incarnation: Blocked, state kept, nothing mutated
    GONE = "gone"  # nothing under the name: ordinary drift repair


def uid_rule(found: Presence, found_uid: str | None, accept_uid: str | None) -> UidRule:
    if found is Presence.ABSENT:
        return UidRule.GONE
    if found is Presence.SAME_UID:
        return UidRule.MATCH
    if accept_uid is not None and accept_uid == found_uid:
        return UidRule.ACCEPTED
    return UidRule.BLOCKED
