"""core.trim: a CR body's trimmed form keeps exactly the fields the operator reads, whatever
else the body carries (issue 39: one tenant's bloated CRs must not exhaust the operator)."""

from __future__ import annotations

import json
from typing import Any

from builders import cr_body
from hypothesis import given, settings
from hypothesis import strategies as st

from takoform_operator.core.conditions import Condition, ConditionType, Reason
from takoform_operator.core.outcome import NextLook, Outcome
from takoform_operator.core.remedies import Remedy
from takoform_operator.core.state import Pending, State, Verb, state_from_status
from takoform_operator.core.trim import METADATA_FIELDS, STATUS_FIELDS, Kept, trimmed
from takoform_operator.kube.crs import desired_from_cr, status_patch
from takoform_operator.kube.handlers import FINALIZER, WATCHED_ANNOTATIONS, cr_trimmer, kept_of
from takoform_operator.kube.loops import Trigger, host_named
from takoform_operator.kube.selector import parse_selector
from takoform_operator.registry_data import load_registry
from takoform_operator.settings import Settings

SELECTOR = "shard in (a,b),!canary"
KEPT = Kept(frozenset(WATCHED_ANNOTATIONS), frozenset({"shard", "canary"}))

_keys = st.sampled_from(
    [*WATCHED_ANNOTATIONS, "shard", "canary", "takoform.io/other", "kopf.zalando.org/x", "a", "b"]
)
_text = st.text(max_size=8)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_status_keys = st.sampled_from([*sorted(STATUS_FIELDS), "foreign", "lastHandled"])
_metadata_extra = st.sampled_from(
    ["managedFields", "ownerReferences", "selfLink", "deletionGracePeriodSeconds", "x-bloat"]
)


@st.composite
def bodies(draw: st.DrawFn) -> dict[str, Any]:
    """A Bucket CR body with any mix of the fields the operator reads and anything else."""
    body = cr_body(
        annotations=draw(st.dictionaries(_keys, st.sampled_from(["true", "false", "u-1", ""]))),
        status=draw(
            st.none()
            | st.dictionaries(_status_keys, st.none() | st.integers(0, 3) | _text, max_size=5)
        ),
        deleting=draw(st.booleans()),
    )
    metadata = body["metadata"]
    metadata["labels"] = draw(st.dictionaries(_keys, st.sampled_from(["a", "b", "c"])))
    metadata["resourceVersion"] = str(draw(st.integers(1, 10**6)))
    for key in draw(st.lists(_metadata_extra, max_size=3)):
        metadata[key] = draw(_json)
    if draw(st.booleans()):
        body["spec"]["extra"] = draw(_json)
    for key in draw(st.lists(st.sampled_from(["foreign", "data"]), max_size=2)):
        body[key] = draw(_json)
    return body


def _read(reader: Any, *args: Any) -> Any:
    """What `reader` makes of its arguments: its value, or the error it raises (a malformed
    status is reported, and must be reported the same from the trimmed body)."""
    try:
        return reader(*args)
    except Exception as exc:
        return repr(exc)


def _reading(body: dict[str, Any]) -> Any:
    """Everything the operator derives from a CR body it holds."""
    return (
        _read(desired_from_cr, body),
        _read(state_from_status, body.get("status")),
        _read(Trigger.of, body, WATCHED_ANNOTATIONS, FINALIZER),
        host_named(body),
        parse_selector(SELECTOR).matches(body["metadata"].get("labels")),
        (body["apiVersion"], body["kind"]),
        {k: body["metadata"].get(k) for k in ("uid", "resourceVersion", "finalizers")},
    )


@settings(max_examples=300)
@given(bodies())
def test_the_trimmed_form_keeps_exactly_what_the_operator_reads(body: dict[str, Any]) -> None:
    before = json.loads(json.dumps(body))
    slim = trimmed(body, KEPT)
    assert body == before, "trimming never changes the body it is given"
    assert _reading(slim) == _reading(body)
    metadata = body["metadata"]
    expected_metadata = {k: metadata[k] for k in METADATA_FIELDS if k in metadata}
    for part, keys in (("annotations", KEPT.annotations), ("labels", KEPT.labels)):
        chosen = {k: v for k, v in metadata[part].items() if k in keys}
        if chosen:
            expected_metadata[part] = chosen
    expected = {
        "apiVersion": body["apiVersion"],
        "kind": body["kind"],
        "metadata": expected_metadata,
        "spec": body["spec"],
    }
    if "status" in body:
        expected["status"] = {k: v for k, v in body["status"].items() if k in STATUS_FIELDS}
    assert slim == expected
    assert trimmed(slim, KEPT) == slim


def test_a_bloated_cr_trims_to_what_a_plain_one_keeps() -> None:
    plain = cr_body(annotations={"takoform.io/paused": "true"})
    bloated = json.loads(json.dumps(plain))
    bloated["metadata"]["labels"] = {f"bloat.example.org/k{i}": "v" * 63 for i in range(2000)}
    bloated["metadata"]["annotations"].update({f"note-{i}": "x" * 500 for i in range(200)})
    bloated["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:x": {}}}]
    bloated["status"] = {"foreign": "y" * 100_000}
    assert trimmed(bloated, KEPT) == {**trimmed(plain, KEPT), "status": {}}
    assert len(json.dumps(trimmed(bloated, KEPT))) < 1000


def test_every_status_field_the_operator_writes_is_kept() -> None:
    outcome = Outcome(
        State(uid="u", pending=Pending("op", Verb.CREATE), attempt=1),
        (Condition(ConditionType.READY, False, Reason.CREATE_PENDING, "pending"),),
        NextLook.PENDING,
        remedies=(Remedy("do this", "kubectl get x"),),
    )
    written = status_patch(outcome, None, now="T", cr_generation=3)
    assert set(written) <= STATUS_FIELDS
    assert "remedies" in written and "observedGeneration" in written


def test_the_trimmer_cuts_form_crs_only() -> None:
    trim = cr_trimmer(load_registry(), Settings(shard_selector=SELECTOR))
    assert kept_of(Settings(shard_selector=SELECTOR)) == KEPT
    body = cr_body(annotations={"foreign": "x", "takoform.io/paused": "false"})
    assert trim(body)["metadata"]["annotations"] == {"takoform.io/paused": "false"}
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"labels": {"a": "b"}}}
    grant = {"apiVersion": "operator.takoform.io/v1alpha1", "kind": "TakoformSpaceGrant",
             "metadata": {"name": "g", "annotations": {"a": "b"}}, "spec": {}}  # fmt: skip
    assert trim(namespace) is namespace and trim(grant) is grant
