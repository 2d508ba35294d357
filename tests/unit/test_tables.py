"""Rules 6 and 7 as tables: every (operation state x resource presence x uid) combination.

The production tables (core/tables.py) are not retyped here. The first half checks each row
against the text of decision 0017 rules 6 and 7, one clause per test, quoted; the second half
drives every row of the production tables through `decide` to prove the core does what the row
says (marker kept or cleared, blocked, state removed).
"""

from __future__ import annotations

import builders
import pytest

from takoform_operator.core.actions import Delete, Target, Update
from takoform_operator.core.conditions import ConditionType, Reason
from takoform_operator.core.decide import Observation, decide
from takoform_operator.core.plan import Plan
from takoform_operator.core.state import (
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
CR_UID = builders.desired().cr_uid
OURS = "uid-ours"
OTHER = "uid-other"
SPEC = builders.SPEC

R, S, F, N = OpState.RUNNING, OpState.SUCCEEDED, OpState.FAILED, OpState.NOT_FOUND
A, SAME, DIFF, UNK = (
    Presence.ABSENT,
    Presence.SAME_UID,
    Presence.DIFFERENT_UID,
    Presence.UNKNOWN_UID,
)
C, KEEP, CLEAR = Conclusion, Marker.KEEP, Marker.CLEAR

Table = dict[tuple[OpState, Presence], Row]
TABLES: dict[str, Table] = {"create-or-update": MUTATION_TABLE, "delete": DELETE_TABLE}
EVERY = [(o, p) for o in OpState for p in Presence]

#: Conclusions that bind state to the resource found: SETTLE without asking for proof (its uid
#: was verified), ADOPT_IF_PROVEN only with our key on it (both checked through decide below).
BINDS = {C.SETTLE, C.ADOPT_IF_PROVEN}


def rows(table_names: tuple[str, ...] = tuple(TABLES)) -> list[object]:
    return [
        pytest.param(TABLES[name], op, found, id=f"{name}-{op}-{found}")
        for name in table_names
        for op, found in EVERY
    ]


def test_tables_cover_every_combination() -> None:
    assert set(MUTATION_TABLE) == set(EVERY)
    assert set(DELETE_TABLE) == set(EVERY)


# -- each row against the text of decision 0017 -------------------------------------------------


@pytest.mark.parametrize(("table", "op", "found"), rows())
def test_the_marker_survives_exactly_while_the_operation_runs(
    table: Table, op: OpState, found: Presence
) -> None:
    """Rule 7, still running: "the marker survives, because nothing has committed"; and
    "pending_operation_id ... is cleared only by an operation that actually settled" (or whose
    record expired: then "the exact resource GET is the final word")."""
    assert (table[(op, found)].marker is KEEP) == (op is R)


@pytest.mark.parametrize("table", TABLES.values(), ids=TABLES)
def test_absence_while_running_is_not_deletion(
    table: Table,
) -> None:
    """Rule 7, still running: "absence is NOT deletion"."""
    assert table[(R, A)].conclusion is C.WAIT


@pytest.mark.parametrize("table", TABLES.values(), ids=TABLES)
def test_a_terminal_error_lets_the_exact_get_decide(
    table: Table,
) -> None:
    """Rule 7, terminal error: "absent means state may be removed, present means the UID
    decides"."""
    assert table[(F, A)].conclusion is C.GONE
    assert table[(F, SAME)].conclusion is C.SETTLE, "our incarnation is there: keep it"
    assert table[(F, DIFF)].conclusion is C.BLOCK, "another incarnation: rule 6"


@pytest.mark.parametrize(("table", "found"), [(t, p) for t in TABLES.values() for p in Presence])
def test_an_expired_record_is_judged_like_a_terminal_error(table: Table, found: Presence) -> None:
    """Rule 7, operation_not_found: "the record expired; the exact resource GET is the final
    word, under the same UID rule". (Whether the next key must be fresh is another matter: an
    expired record says nothing about how the operation ended.)"""
    expired, failed = table[(N, found)], table[(F, found)]
    assert (expired.conclusion, expired.marker) == (failed.conclusion, failed.marker)


@pytest.mark.parametrize(("table", "found"), [(t, p) for t in TABLES.values() for p in Presence])
def test_an_expired_record_leaves_its_key_spent(table: Table, found: Presence) -> None:
    """A host may keep a key longer than its record (H-28 promises the replay only while the
    record is retained): re-sending under it would be answered with the expired operation,
    not found again at the next look, for ever. Whatever follows uses a fresh key."""
    assert table[(N, found)].fresh_attempt


def test_a_successful_mutation_settles_only_the_verified_uid() -> None:
    """Rule 7, terminal success: "the result resource is verified against the exact identity and
    its UID checked; the ordinary read settles and clears"."""
    assert MUTATION_TABLE[(S, SAME)] == Row(C.SETTLE, CLEAR)
    assert MUTATION_TABLE[(S, DIFF)].conclusion not in BINDS


@pytest.mark.parametrize(("table", "op"), [(t, o) for t in TABLES.values() for o in OpState])
def test_a_different_uid_is_never_rebound(table: Table, op: OpState) -> None:
    """Rule 7: "No branch re-binds by name alone: a known UID is verified in every branch"."""
    assert table[(op, DIFF)].conclusion not in BINDS


@pytest.mark.parametrize("op", OpState)
def test_a_uid_mismatch_under_a_pending_mutation_blocks_and_keeps_state(op: OpState) -> None:
    """Rule 6: "It never re-binds and never removes" - the resource stays in state, blocked."""
    assert MUTATION_TABLE[(op, DIFF)].conclusion is C.BLOCK


@pytest.mark.parametrize(("table", "op"), [(t, o) for t in TABLES.values() for o in OpState])
def test_an_unknown_uid_is_never_settled_without_proof(table: Table, op: OpState) -> None:
    """Rule 7: "an unknown one is adopted only from a representation the host served under the
    exact FormRef state records" - and, for a mutation of ours, only with our key on it."""
    assert table[(op, UNK)].conclusion is not C.SETTLE
    if table is MUTATION_TABLE:
        assert table[(op, UNK)].conclusion is C.ADOPT_IF_PROVEN


@pytest.mark.parametrize("op", OpState)
def test_a_pending_delete_never_adopts_or_settles_a_stranger(op: OpState) -> None:
    """A delete sends the uid it expects; whatever else sits under the name is not ours to take
    (and so never a target of the next delete)."""
    assert DELETE_TABLE[(op, DIFF)].conclusion not in BINDS
    assert DELETE_TABLE[(op, UNK)].conclusion not in BINDS


def _resource(uid: str, *, key: str | None = None, spec: dict | None = None) -> ResourceView:
    return builders.served(
        form_ref=BUCKET,
        uid=uid,
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
    desired = builders.desired(deleting=deleting)
    return decide(desired, state, Plan("op-1", target), Observation(view, resource), REGISTRY)


@pytest.mark.parametrize(("op", "found"), EVERY, ids=[f"{o}-{p}" for o, p in EVERY])
def test_decide_follows_mutation_rows(op: OpState, found: Presence) -> None:
    row = MUTATION_TABLE[(op, found)]
    why = f"{op} and {found} -> {row}"
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
        # The resource carries somebody else's key: never adopted (see test_adoption.py).
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


@pytest.mark.parametrize(("op", "found"), EVERY, ids=[f"{o}-{p}" for o, p in EVERY])
def test_decide_follows_delete_rows(op: OpState, found: Presence) -> None:
    row = DELETE_TABLE[(op, found)]
    why = f"{op} and {found} -> {row}"
    decision = _run(Verb.DELETE, op, found, deleting=True)
    outcome = decision.outcome
    if row.conclusion is C.GONE:
        assert outcome.finalized and decision.action is None, why
        return
    assert (outcome.state.pending is not None) == (row.marker is KEEP), why
    if row.conclusion is C.WAIT:
        assert not outcome.finalized, why
    elif row.conclusion is C.BLOCK:
        assert not outcome.finalized and decision.action is None, "never delete a replacement"
        assert outcome.asserted().get(ConditionType.BLOCKED) is not None, why
    elif row.marker is KEEP:
        assert decision.action is None, why
    elif op is OpState.FAILED:
        assert decision.action is None, why
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
    desired = builders.desired(parameters={**SPEC, "sizeGiB": 20}, cr_generation=2)
    target = Target("team-a", BUCKET, "logs")
    decision = decide(
        desired, state, Plan(None, target), Observation(None, _resource(OURS)), REGISTRY
    )
    assert isinstance(decision.action, Update)
    assert decision.action.expected_generation == "1"
    assert decision.action.expected_uid == OURS
    assert decision.action.spec["sizeGiB"] == 20
    assert decision.action.key == f"{CR_UID}:update:{OURS}:2:1:0"
