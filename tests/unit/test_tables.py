"""Rules 6 and 7 as tables: every (operation state x resource presence x uid) combination.

Each row names the conclusion and why; the second half drives the same rows through `decide` to
prove the core does what the row says (marker kept or cleared, blocked, state removed).
"""

from __future__ import annotations

import pytest

from takoform_operator.core.conditions import ConditionType, Reason
from takoform_operator.core.reconcile import Delete, Observation, Plan, Target, Update, decide
from takoform_operator.core.state import (
    Desired,
    OperationView,
    OpState,
    Pending,
    ResourceView,
    State,
    Verb,
)
from takoform_operator.core.tables import (
    DELETE_TABLE,
    MUTATION_TABLE,
    Conclusion,
    Marker,
    Presence,
    Row,
    UidRule,
    presence,
    uid_rule,
)
from takoform_operator.registry_data import load_registry

REGISTRY = load_registry()
BUCKET = next(
    r for r in REGISTRY.supported if r.kind == "Bucket" and r.definition_version == "1.0.0"
)
CR_UID = "cr-0001"
OURS = "uid-ours"
OTHER = "uid-other"
SPEC = {"region": "eu-west-1", "sizeGiB": 10}

R, S, F, N = OpState.RUNNING, OpState.SUCCEEDED, OpState.FAILED, OpState.NOT_FOUND
A, SAME, DIFF, UNK = (
    Presence.ABSENT,
    Presence.SAME_UID,
    Presence.DIFFERENT_UID,
    Presence.UNKNOWN_UID,
)
C, KEEP, CLEAR, FRESH = Conclusion, Marker.KEEP, Marker.CLEAR, True

# (op state, presence, row, why) — rule 7 for a pending create or update. A row says the
# conclusion, what happens to the pending marker, and whether the next key must be fresh.
MUTATION_ROWS = [
    (R, A, Row(C.WAIT, KEEP), "running: absence is not deletion, nothing committed"),
    (R, SAME, Row(C.SETTLE, KEEP), "running: a readable representation settles, marker survives"),
    (R, DIFF, Row(C.BLOCK, KEEP), "running: another incarnation under the name is rule 6"),
    (R, UNK, Row(C.ADOPT_IF_PROVEN, KEEP), "running: an unrecorded uid needs proof"),
    (S, A, Row(C.GONE, CLEAR, FRESH), "succeeded, then removed out of band: drift, marker settled"),
    (S, SAME, Row(C.SETTLE, CLEAR), "succeeded: result verified by uid, settle and clear"),
    (S, DIFF, Row(C.BLOCK, CLEAR), "succeeded but another uid is there: blocked, never rebound"),
    (
        S,
        UNK,
        Row(C.ADOPT_IF_PROVEN, CLEAR),
        "succeeded, uid unknown: adopt only with our key on it",
    ),
    (F, A, Row(C.GONE, CLEAR, FRESH), "failed and absent: state may be removed"),
    (
        F,
        SAME,
        Row(C.SETTLE, CLEAR, FRESH),
        "failed but present with our uid: the uid decides, keep it",
    ),
    (F, DIFF, Row(C.BLOCK, CLEAR, FRESH), "failed, another uid present: blocked"),
    (F, UNK, Row(C.ADOPT_IF_PROVEN, CLEAR, FRESH), "failed, uid unknown: adopt only with proof"),
    (N, A, Row(C.GONE, CLEAR, FRESH), "record expired, absent: the exact GET is the final word"),
    (N, SAME, Row(C.SETTLE, CLEAR), "record expired, our uid present: settle"),
    (N, DIFF, Row(C.BLOCK, CLEAR), "record expired, another uid: blocked"),
    (N, UNK, Row(C.ADOPT_IF_PROVEN, CLEAR), "record expired, uid unknown: adopt only with proof"),
]

DELETE_ROWS = [
    (R, A, Row(C.WAIT, KEEP), "delete running: never conclude before it commits"),
    (R, SAME, Row(C.SETTLE, KEEP), "delete running, still there: settle, keep marker"),
    (R, DIFF, Row(C.BLOCK, KEEP), "delete running, another uid: blocked"),
    (R, UNK, Row(C.WAIT, KEEP), "delete running, uid unknown: wait"),
    (S, A, Row(C.GONE, CLEAR), "deleted: finalize"),
    (
        S,
        SAME,
        Row(C.SETTLE, CLEAR, FRESH),
        "host says deleted but ours is there: keep, delete again",
    ),
    (S, DIFF, Row(C.GONE, CLEAR), "ours is deleted; the replacement is not ours to touch"),
    (S, UNK, Row(C.GONE, CLEAR), "ours is deleted"),
    (F, A, Row(C.GONE, CLEAR), "failed but absent: gone"),
    (
        F,
        SAME,
        Row(C.SETTLE, CLEAR, FRESH),
        "failed, still there: keep state, retry with a fresh key",
    ),
    (F, DIFF, Row(C.BLOCK, CLEAR, FRESH), "failed, another uid: blocked"),
    (F, UNK, Row(C.BLOCK, CLEAR, FRESH), "failed, uid unknown: blocked"),
    (N, A, Row(C.GONE, CLEAR), "expired, absent: gone"),
    (N, SAME, Row(C.SETTLE, CLEAR, FRESH), "expired, still there: keep state and delete again"),
    (N, DIFF, Row(C.BLOCK, CLEAR), "expired, another uid: blocked"),
    (N, UNK, Row(C.BLOCK, CLEAR), "expired, uid unknown: blocked"),
]


def test_tables_cover_every_combination() -> None:
    every = {(o, p) for o in OpState for p in Presence}
    assert set(MUTATION_TABLE) == every
    assert set(DELETE_TABLE) == every
    assert {(o, p) for o, p, _, _ in MUTATION_ROWS} == every
    assert {(o, p) for o, p, _, _ in DELETE_ROWS} == every


@pytest.mark.parametrize(("op", "found", "row", "why"), MUTATION_ROWS)
def test_mutation_table_row(op: OpState, found: Presence, row: Row, why: str) -> None:
    assert MUTATION_TABLE[(op, found)] == row, why


@pytest.mark.parametrize(("op", "found", "row", "why"), DELETE_ROWS)
def test_delete_table_row(op: OpState, found: Presence, row: Row, why: str) -> None:
    assert DELETE_TABLE[(op, found)] == row, why


def _resource(uid: str, *, key: str | None = None, spec: dict | None = None) -> ResourceView:
    return ResourceView(
        form_ref=BUCKET,
        space="team-a",
        name="logs",
        uid=uid,
        generation="1",
        revision="2",
        spec=spec if spec is not None else {**SPEC, "public": False},
        outputs={"endpoint": "https://logs", "arn": "arn:logs"},
        creation_key=key,
    )


@pytest.mark.parametrize(
    ("found", "expected", "presence_is", "why"),
    [
        (None, OURS, A, "nothing under the name"),
        (None, None, A, "absence does not depend on the uid"),
        (OURS, OURS, SAME, "the recorded incarnation"),
        (OTHER, OURS, DIFF, "another incarnation under the same name"),
        (OTHER, None, UNK, "present, but nothing recorded to compare with"),
    ],
)
def test_presence(found: str | None, expected: str | None, presence_is: Presence, why: str) -> None:
    resource = _resource(found) if found else None
    assert presence(resource, expected) is presence_is, why


@pytest.mark.parametrize(
    ("found", "found_uid", "accept", "rule", "why"),
    [
        (A, None, None, UidRule.GONE, "replacement gone: ordinary drift repair"),
        (SAME, OURS, None, UidRule.MATCH, "recorded (or restored prior) incarnation"),
        (DIFF, OTHER, None, UidRule.BLOCKED, "another incarnation: blocked"),
        (DIFF, OTHER, OTHER, UidRule.ACCEPTED, "user explicitly imported the new incarnation"),
        (DIFF, OTHER, "uid-third", UidRule.BLOCKED, "accepting some other uid changes nothing"),
    ],
)
def test_uid_rule(
    found: Presence, found_uid: str | None, accept: str | None, rule: UidRule, why: str
) -> None:
    assert uid_rule(found, found_uid, accept) is rule, why


# -- the same rows through decide() ------------------------------------------------------------


def _desired(**changes: object) -> Desired:
    base = {
        "cr_uid": CR_UID,
        "cr_generation": 1,
        "line": BUCKET.line,
        "space": "team-a",
        "name": "logs",
        "parameters": SPEC,
    }
    base.update(changes)
    return Desired(**base)  # type: ignore[arg-type]


def _run(verb: Verb, op: OpState, found: Presence, *, deleting: bool = False):
    known_uid = None if found is UNK else OURS
    state = State(
        form_ref=BUCKET,
        space="team-a",
        name="logs",
        uid=known_uid,
        pending=Pending("op-1", verb),
        attempt=3,
    )
    resource = {
        A: None,
        SAME: _resource(OURS),
        DIFF: _resource(OTHER),
        UNK: _resource(OTHER, key="someone-else:create:0"),
    }[found]
    view = OperationView(op, resource_uid=known_uid, error_code="provisioning_failed")
    target = Target("team-a", BUCKET, "logs")
    desired = _desired(deleting=deleting)
    return decide(desired, state, Plan("op-1", target), Observation(view, resource), REGISTRY)


@pytest.mark.parametrize(("op", "found", "row", "why"), MUTATION_ROWS)
def test_decide_follows_mutation_rows(op: OpState, found: Presence, row: Row, why: str) -> None:
    decision = _run(Verb.CREATE, op, found)
    state = decision.outcome.state
    conditions = decision.outcome.asserted()
    assert (state.pending is not None) == (row.marker is KEEP), why
    assert state.attempt == (4 if row.fresh_attempt else 3), why
    assert state.form_ref == BUCKET, "the recorded target is never dropped"
    if row.conclusion is C.WAIT:
        assert state.uid == OURS, why
        assert decision.action is None
    elif row.conclusion is C.BLOCK:
        assert conditions[ConditionType.BLOCKED] is Reason.UID_MISMATCH, why
        assert state.uid == OURS, "state kept"
        assert decision.action is None, "no mutation while blocked"
    elif row.conclusion is C.ADOPT_IF_PROVEN:
        # The resource carries somebody else's key: never adopted.
        assert conditions[ConditionType.BLOCKED] is Reason.NAME_TAKEN, why
        assert state.uid is None and decision.action is None
    elif row.conclusion is C.GONE:
        assert state.uid is None, why
    elif row.conclusion is C.SETTLE and row.marker is KEEP:
        assert state.revision == "2", why
    elif row.conclusion is C.SETTLE:
        assert state.uid == OURS, why
        if op is OpState.FAILED:
            assert conditions[ConditionType.DEGRADED] is Reason.OPERATION_FAILED
        else:
            assert conditions[ConditionType.READY] is Reason.AVAILABLE


@pytest.mark.parametrize(("op", "found", "row", "why"), DELETE_ROWS)
def test_decide_follows_delete_rows(op: OpState, found: Presence, row: Row, why: str) -> None:
    decision = _run(Verb.DELETE, op, found, deleting=True)
    outcome = decision.outcome
    if row.conclusion is C.WAIT:
        assert outcome.state.pending is not None and not outcome.finalized, why
    elif row.conclusion is C.GONE:
        assert outcome.finalized and decision.action is None, why
    elif row.conclusion is C.BLOCK:
        assert not outcome.finalized and decision.action is None, "never delete a replacement"
        assert outcome.asserted().get(ConditionType.BLOCKED) is not None, why
        assert (outcome.state.pending is not None) == (row.marker is KEEP), why
    elif row.marker is KEEP:
        assert outcome.state.pending is not None and decision.action is None, why
    elif op is OpState.FAILED:
        assert decision.action is None and outcome.state.pending is None, why
        assert outcome.state.attempt == 4, "the next delete uses a fresh key"
    else:
        assert isinstance(decision.action, Delete), "delete again, with a fresh key"
        assert decision.action.expected_uid == OURS
        assert decision.action.key.endswith(":4")


def test_running_update_with_changed_spec_sends_nothing() -> None:
    """Never two mutations at once: a pending update is waited for, not stacked."""
    decision = _run(Verb.UPDATE, OpState.RUNNING, Presence.SAME_UID)
    assert decision.action is None


def test_settled_update_then_new_desired_spec_updates_with_fences() -> None:
    state = State(form_ref=BUCKET, space="team-a", name="logs", uid=OURS, attempt=0)
    desired = _desired(parameters={**SPEC, "sizeGiB": 20}, cr_generation=2)
    target = Target("team-a", BUCKET, "logs")
    decision = decide(
        desired, state, Plan(None, target), Observation(None, _resource(OURS)), REGISTRY
    )
    assert isinstance(decision.action, Update)
    assert decision.action.expected_generation == "1"
    assert decision.action.expected_uid == OURS
    assert decision.action.spec["sizeGiB"] == 20
    assert decision.action.key == f"{CR_UID}:update:{OURS}:2:1:0"
