"""The decision tables of decision 0017 rules 6 and 7, written out row by row.

They answer one question: given what a single consultation of the pending operation said and what
the exact resource GET found, what may the read conclude? Keeping them as data makes every
combination visible and testable (tests/unit/test_tables.py walks each row).
"""

from __future__ import annotations

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
    #: Absence is NOT deletion: nothing committed yet. Keep state and the marker; look again.
    WAIT = "wait"
    #: A readable representation settles state, but the marker survives (nothing committed).
    SETTLE_KEEP_MARKER = "settle-keep-marker"
    #: The operation settled and the exact resource is ours: settle state, clear the marker.
    SETTLE_CLEAR = "settle-clear"
    #: The resource is gone: the marker is cleared and state may be removed.
    GONE_CLEAR = "gone-clear"
    #: Another incarnation sits under the name: Blocked, state kept, marker kept.
    BLOCK_KEEP_MARKER = "block-keep-marker"
    #: Another incarnation sits under the name: Blocked, state kept; the operation settled.
    BLOCK_CLEAR = "block-clear"
    #: A uid nobody recorded: adopt only with proof (our idempotency key on it), marker kept.
    ADOPT_IF_PROVEN_KEEP_MARKER = "adopt-if-proven-keep-marker"
    #: A uid nobody recorded: adopt only with proof; the operation settled, marker cleared.
    ADOPT_IF_PROVEN_CLEAR = "adopt-if-proven-clear"


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
C = Conclusion

#: Rule 7 for a pending CREATE or UPDATE: (operation state, presence) -> conclusion.
MUTATION_TABLE: dict[tuple[OpState, Presence], Conclusion] = {
    # still running: absence is not deletion; a readable representation settles, marker survives
    (_R, _A): C.WAIT,
    (_R, _SAME): C.SETTLE_KEEP_MARKER,
    (_R, _DIFF): C.BLOCK_KEEP_MARKER,
    (_R, _UNK): C.ADOPT_IF_PROVEN_KEEP_MARKER,
    # terminal success: the result is verified against the exact identity and its uid checked
    (_S, _A): C.GONE_CLEAR,  # committed, then removed by someone else: drift, not our success
    (_S, _SAME): C.SETTLE_CLEAR,
    (_S, _DIFF): C.BLOCK_CLEAR,
    (_S, _UNK): C.ADOPT_IF_PROVEN_CLEAR,
    # terminal error: the exact GET is the final word; absent -> removable, present -> uid decides
    (_F, _A): C.GONE_CLEAR,
    (_F, _SAME): C.SETTLE_CLEAR,
    (_F, _DIFF): C.BLOCK_CLEAR,
    (_F, _UNK): C.ADOPT_IF_PROVEN_CLEAR,
    # record expired: the exact GET is the final word, under the same uid rule
    (_N, _A): C.GONE_CLEAR,
    (_N, _SAME): C.SETTLE_CLEAR,
    (_N, _DIFF): C.BLOCK_CLEAR,
    (_N, _UNK): C.ADOPT_IF_PROVEN_CLEAR,
}

#: Rule 7 for a pending DELETE. Absence or another incarnation means OUR incarnation is gone;
#: the replacement is never touched (deletes always carry the expected uid).
DELETE_TABLE: dict[tuple[OpState, Presence], Conclusion] = {
    (_R, _A): C.WAIT,  # not committed: the resource may be mid-delete; never conclude early
    (_R, _SAME): C.SETTLE_KEEP_MARKER,
    (_R, _DIFF): C.BLOCK_KEEP_MARKER,
    (_R, _UNK): C.WAIT,
    (_S, _A): C.GONE_CLEAR,
    (_S, _SAME): C.SETTLE_CLEAR,  # host says done yet it is there: keep it, delete again
    (_S, _DIFF): C.GONE_CLEAR,  # ours was deleted; the replacement is not ours to touch
    (_S, _UNK): C.GONE_CLEAR,
    (_F, _A): C.GONE_CLEAR,
    (_F, _SAME): C.SETTLE_CLEAR,  # still there: keep state, retry with a fresh attempt
    (_F, _DIFF): C.BLOCK_CLEAR,
    (_F, _UNK): C.BLOCK_CLEAR,
    (_N, _A): C.GONE_CLEAR,
    (_N, _SAME): C.SETTLE_CLEAR,
    (_N, _DIFF): C.BLOCK_CLEAR,
    (_N, _UNK): C.BLOCK_CLEAR,
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
