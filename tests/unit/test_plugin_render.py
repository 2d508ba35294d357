"""What the plugin prints (plugin.render): kinds as kubectl names them, the import manifest (whose
first reconcile, run through the core itself, sends nothing), the Blocked table with the remedy as
the core wrote it, the trace chain, the TakoformBindings table and what `release` decides."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from core_steps import decided
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from takoform_operator.core.binding import Binding, ClaimRef, Identity, Phase, binding_from_json
from takoform_operator.core.conditions import ConditionType, Reason
from takoform_operator.core.decide import Observation
from takoform_operator.core.import_id import canonical_import_id, parse_import_id
from takoform_operator.core.shard_ring import SLOT_LABEL
from takoform_operator.core.state import Requested, ResourceView, State
from takoform_operator.kube.crs import desired_from_cr
from takoform_operator.plugin.commands import dumped, parser
from takoform_operator.plugin.render import (
    Lookup,
    Trace,
    UsageError,
    blocked_document,
    blocked_report,
    blocked_rows,
    check_object_name,
    import_manifest,
    remedy_of,
    resolve_kind,
    split_kind_name,
    table,
    trace_document,
    trace_report,
)
from takoform_operator.plugin.render_bindings import (
    binding_name_arg,
    binding_rows,
    bindings_document,
    bindings_report,
    claim_arg,
    release_refusal,
    reserved_document,
    reserved_message,
    unbound_message,
)
from takoform_operator.registry_data import load_registry
from takoform_spec.definitions import parse_definition
from takoform_spec.identity import FormLine, FormRef

from .strategies import document_strategy

REGISTRY = load_registry()
BUCKET = FormLine("storage.takoform.io/v1", "Bucket")
REFS = sorted(REGISTRY.supported)


# -- kinds ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "Bucket",
        "bucket",
        "buckets",
        "tkbucket",
        "BUCKETS",
        "buckets.storage.takoform.io",
        "bucket.storage.takoform.io",
    ],
)
def test_a_kind_resolves_the_way_kubectl_names_it(text: str) -> None:
    assert resolve_kind(REGISTRY, text) == BUCKET


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("widgets", "unknown kind 'widgets'; the Takoform kinds are: "),
        ("buckets.other.io", "unknown kind"),
    ],
)
def test_an_unknown_kind_lists_the_kinds_there_are(text: str, words: str) -> None:
    with pytest.raises(UsageError) as caught:
        resolve_kind(REGISTRY, text)
    assert words in str(caught.value)
    assert "buckets.storage.takoform.io" in str(caught.value)


def test_a_kind_in_two_groups_must_be_qualified() -> None:
    ref = REGISTRY.default_create_ref(BUCKET)
    assert ref is not None
    other = REGISTRY.lookup(ref).definition
    schema = {**dict(other.schema), "apiVersion": "archive.example.io/v1"}
    twin = parse_definition(schema, other.package_digest, "twin")
    registry = REGISTRY.register(twin, default_create=True)
    with pytest.raises(UsageError) as caught:
        resolve_kind(registry, "bucket")
    assert "ambiguous" in str(caught.value) and "buckets.archive.example.io" in str(caught.value)
    assert resolve_kind(registry, "bucket.archive.example.io").group == "archive.example.io"


@pytest.mark.parametrize("text", ["bucket", "bucket/", "/logs", "bucket/a/b"])
def test_trace_wants_kind_slash_name(text: str) -> None:
    with pytest.raises(UsageError):
        split_kind_name(text)


def test_split_kind_name() -> None:
    assert split_kind_name("buckets.storage.takoform.io/logs") == (
        "buckets.storage.takoform.io",
        "logs",
    )


@pytest.mark.parametrize("name", ["Logs", "under_score", "-x", "a" * 254, ""])
def test_a_host_name_that_is_no_object_name_asks_for_name(name: str) -> None:
    with pytest.raises(UsageError) as caught:
        check_object_name(name)
    assert "--name" in str(caught.value)


# -- import ---------------------------------------------------------------------------------------


def _manifest(ref: FormRef, parameters: dict[str, Any], **changes: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "ref": ref,
        "space": "team-a",
        "name": "logs",
        "parameters": parameters,
        "cr_name": "imported",
        "namespace": "apps",
        "host_ref": None,
        "pin": ref != REGISTRY.default_create_ref(ref.line),
        "management": "Full",
        "deletion_policy": "Delete",
        **changes,
    }
    return import_manifest(**arguments)


def _as_applied(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest through YAML (as printed) and JSON (as the API server stores it)."""
    body = json.loads(json.dumps(yaml.safe_load(yaml.safe_dump(manifest, sort_keys=False))))
    body["metadata"].update(uid="cr-uid-1", generation=1)
    return dict(body)


@settings(max_examples=30, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_an_imported_manifest_reconciles_to_ready_without_a_mutation(data: st.DataObject) -> None:
    """The first reconcile of the printed CR, run through the core itself: it binds the host's
    incarnation and plans no action at all (no update)."""
    ref = data.draw(st.sampled_from(REFS))
    codec = REGISTRY.codec_for(ref)
    fields = REGISTRY.lookup(ref).definition.fields
    # What the host stores: the spec it was given with its declared defaults filled in.
    stored = codec.normalize(ref, data.draw(document_strategy(fields)))
    body = _as_applied(_manifest(ref, codec.decode(ref, stored)))
    want = desired_from_cr(body)
    assert parse_import_id(str(want.import_id), None).form_ref == ref

    served = ResourceView(
        form_ref=ref, space="team-a", name="logs", uid="u-1", generation="3", revision="7",
        spec=stored,
    )  # fmt: skip
    state = State()
    for _ in range(2):  # the import binds, then the spec is compared
        decision = decided(want, state, Observation(resource=served), REGISTRY)
        assert decision.action is None, decision.action
        state = decision.outcome.state
    ready = [c for c in decision.outcome.conditions if c.type is ConditionType.READY]
    assert ready and ready[0].status and ready[0].reason is Reason.AVAILABLE
    assert state.uid == "u-1" and state.form_ref == ref


def test_the_manifest_names_the_exact_identity() -> None:
    ref = REGISTRY.default_create_ref(BUCKET)
    assert ref is not None
    manifest = _manifest(ref, {"region": "eu-west-1"}, host_ref="prod", management="Observe")
    assert manifest["apiVersion"] == "storage.takoform.io/v1" and manifest["kind"] == "Bucket"
    assert manifest["metadata"] == {"name": "imported", "namespace": "apps"}
    spec = manifest["spec"]
    assert spec["resourceName"] == "logs" and spec["space"] == "team-a"
    assert spec["hostRef"] == "prod"
    assert spec["importId"] == canonical_import_id("team-a", "logs", ref)
    assert spec["managementPolicy"] == "Observe"
    assert "formRef" not in spec, "the default create ref needs no pin"
    printed = yaml.safe_dump(manifest, sort_keys=False)
    assert "managementPolicy: Observe\n" in printed


def test_an_import_under_another_definition_pins_it() -> None:
    older = next(r for r in REGISTRY.known_refs(BUCKET) if r.definition_version == "2.0.0")
    spec = _manifest(older, {"region": "eu-west-1", "quota": "1Gi"})["spec"]
    assert spec["formRef"] == {
        "definitionVersion": older.definition_version,
        "schemaDigest": older.schema_digest,
    }


def test_without_a_namespace_or_host_neither_is_set() -> None:
    ref = REGISTRY.default_create_ref(BUCKET)
    assert ref is not None
    manifest = _manifest(ref, {"region": "eu-west-1"}, namespace=None)
    assert "namespace" not in manifest["metadata"] and "hostRef" not in manifest["spec"]
    assert manifest["spec"]["managementPolicy"] == "Full", "always stated, never implied"


@pytest.mark.parametrize(
    ("flags", "management", "deletion"),
    [
        ([], "Observe", "Orphan"),
        (["--observe"], "Observe", "Orphan"),
        (["--full"], "Full", "Orphan"),
        (["--full", "--deletion-policy", "Delete"], "Full", "Delete"),
    ],
)
def test_an_import_is_read_only_and_orphaning_unless_asked(
    flags: list[str], management: str, deletion: str
) -> None:
    """The safe default (as ackctl's): a first apply of a printed import can neither change
    nor delete the host resource."""
    args = parser("kubectl takoform").parse_args(["import", "logs", *flags])
    assert (args.management, args.deletion_policy) == (management, deletion)


def test_observe_and_full_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parser("kubectl takoform").parse_args(["import", "logs", "--observe", "--full"])
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


# -- blocked --------------------------------------------------------------------------------------


def _cr(name: str, namespace: str, *conditions: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "status": {"conditions": list(conditions)},
    }


def _condition(kind: str, status: str, reason: str, message: str = "") -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


ANNOTATE = (
    "uid mismatch: state is bound to uid a but the host serves uid b under the same name; "
    "nothing is mutated while blocked. Remedies: (1) import the new incarnation explicitly: "
    "kubectl annotate buckets.storage.takoform.io -n team-a logs takoform.io/accept-uid=b ; "
    "(2) restore the prior incarnation a on the host; (3) delete the host-side replacement b."
)


@pytest.mark.parametrize(
    ("message", "remedy"),
    [
        (ANNOTATE, ANNOTATE[ANNOTATE.index("(1)") :]),
        ("a resource exists. Remedy: import it explicitly.", "import it explicitly."),
        ("nothing to say", "nothing to say"),
        ("x. Remedy: one. Remedies: two.", "one. Remedies: two."),
    ],
)
def test_the_remedy_is_the_message_from_its_marker_on(message: str, remedy: str) -> None:
    assert remedy_of(message) == remedy


def test_only_crs_blocked_true_are_rows() -> None:
    items = [
        _cr("a", "ns1", _condition("Blocked", "True", "UidMismatch", ANNOTATE)),
        _cr("b", "ns1", _condition("Blocked", "False", "UidMismatch", "old")),
        _cr("c", "ns2", _condition("Ready", "True", "Available")),
        {"metadata": {"name": "d", "namespace": "ns2"}},
    ]
    rows = blocked_rows(BUCKET, items)
    assert [(r.namespace, r.resource, r.reason) for r in rows] == [
        ("ns1", "bucket.storage.takoform.io/a", "UidMismatch")
    ]
    assert rows[0].remedy.startswith("(1) import") and "kubectl annotate" in rows[0].remedy


def test_the_blocked_table_and_its_empty_form() -> None:
    rows = blocked_rows(
        BUCKET,
        [
            _cr("zz", "b", _condition("Blocked", "True", "NameTaken", "x. Remedy: import it.")),
            _cr("a", "a", _condition("Blocked", "True", "UidMismatch", ANNOTATE)),
        ],
    )
    text = blocked_report(rows, None)
    lines = text.splitlines()
    assert lines[0].split() == ["NAMESPACE", "RESOURCE", "REASON", "REMEDY"]
    assert lines[1].startswith("a ") and lines[2].startswith("b "), "sorted by namespace"
    assert lines[2].endswith("NameTaken     import it.")
    starts = {
        line.index(word) for line, word in zip(lines, ["REMEDY", "(1)", "import"], strict=True)
    }
    assert len(starts) == 1, "the remedy column is aligned"
    assert blocked_report([], "team-a") == "No Blocked resources in namespace team-a."
    assert blocked_report([], None) == "No Blocked resources."


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_blocked_as_a_document_carries_the_recorded_remedies(output: str) -> None:
    body = _cr("a", "ns1", _condition("Blocked", "True", "UidMismatch", ANNOTATE))
    recorded = {"does": "import it", "command": "kubectl annotate x", "actsOn": "ns1/a"}
    body["status"]["remedies"] = [recorded]
    text = dumped(blocked_document(blocked_rows(BUCKET, [body])), output)
    document = json.loads(text) if output == "json" else yaml.safe_load(text)
    (item,) = document["items"]
    assert item["resource"] == "bucket.storage.takoform.io/a" and item["reason"] == "UidMismatch"
    assert item["message"] == ANNOTATE and item["remedies"] == [recorded]
    assert dumped(blocked_document([]), output).strip() in ('{\n  "items": []\n}', "items: []")


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_a_document_escapes_what_a_terminal_would_obey(output: str) -> None:
    hostile = "\x1b[2J\u202eREMEDY\nfake row"
    body = _cr("a", "ns1", _condition("Blocked", "True", "NameTaken", hostile))
    text = dumped(blocked_document(blocked_rows(BUCKET, [body])), output)
    assert text.isascii() and "\x1b" not in text and "\u202e" not in text
    document = json.loads(text) if output == "json" else yaml.safe_load(text)
    assert document["items"][0]["message"] == hostile, "escaped, not lost"


def test_table_pads_all_but_the_last_column() -> None:
    assert table(("A", "BB"), [("xyz", "1"), ("", "long last")]) == (
        "A     BB\nxyz   1\n      long last"
    )


# -- trace ----------------------------------------------------------------------------------------

REF = REGISTRY.default_create_ref(BUCKET)
assert REF is not None


def _traced(**changes: Any) -> str:
    cr = changes.pop("cr", None) or {
        "metadata": {"name": "logs", "namespace": "apps", "uid": "cr-1", "generation": 2},
        "status": {
            "formRef": REF.to_json(),
            "host": "prod",
            "space": "team-a",
            "name": "logs",
            "uid": "h-1",
            "observedGeneration": 2,
            "conditions": [_condition("Ready", "True", "Available", "host resource is up to date")],
        },
    }
    arguments: dict[str, Any] = {
        "host": "prod",
        "resource": Lookup(
            {
                "metadata": {"uid": "h-1", "generation": "4", "revision": "9"},
                "status": {
                    "observedGeneration": "3",
                    "conditions": [
                        {"type": "Ready", "status": "False", "reason": "Provisioning",
                         "hostReason": "disk_full", "message": "waiting"},
                    ],
                },
            }
        ),
        "operation": Lookup(),
        "events": [
            {"type": "Normal", "reason": "Imported", "message": "bound", "lastTimestamp": "T2"},
            {"type": "Warning", "reason": "Old", "message": "x", "lastTimestamp": "T1"},
        ],
        "event_count": 10,
        **changes,
    }  # fmt: skip
    return trace_report(Trace(BUCKET, cr, **arguments))


def test_trace_as_a_document_says_what_it_read_and_what_it_could_not() -> None:
    cr = {
        "metadata": {"name": "logs", "namespace": "apps", "uid": "cr-1", "generation": 2},
        "status": {"formRef": REF.to_json(), "space": "team-a", "name": "logs", "uid": "h-1",
                   "pendingOperationId": "op-7", "pendingOperationVerb": "Update"},
    }  # fmt: skip
    document = trace_document(
        Trace(
            BUCKET,
            cr,
            host="prod",
            resource=Lookup({"metadata": {"uid": "h-1"}}),
            operation=Lookup(problem="no token for host prod"),
            events=[{"reason": "A", "lastTimestamp": "T1"}, {"reason": "B", "lastTimestamp": "T2"}],
            event_count=1,
        )
    )
    assert document["cr"]["resource"] == "bucket.storage.takoform.io/logs"
    assert document["recorded"] == {
        "formRef": REF.to_json(), "host": "prod", "space": "team-a", "name": "logs", "uid": "h-1"
    }  # fmt: skip
    assert document["hostResource"] == {"found": True, "document": {"metadata": {"uid": "h-1"}}}
    assert document["pendingOperation"] == {
        "id": "op-7", "verb": "Update", "found": None, "problem": "no token for host prod"
    }  # fmt: skip
    assert [e["reason"] for e in document["events"]] == ["B"] and document["eventCount"] == 2
    assert json.loads(dumped(document, "json")) == document


def test_trace_shows_the_chain_in_order() -> None:
    text = _traced()
    order = ["Bucket logs in namespace apps", "FormRef", "Host resource", "Pending", "Events"]
    positions = [text.index(part) for part in order]
    assert positions == sorted(positions)
    assert "CR uid cr-1, generation 2, observedGeneration 2" in text
    assert f"{REF.definition_version} {REF.schema_digest}" in text
    assert "host prod, space team-a, name logs, uid h-1" in text
    assert "uid h-1, generation 4, observedGeneration 3, revision 9" in text
    assert "Provisioning (host: disk_full)" in text
    assert "Pending operation\n  none" in text
    events = text.split("Events (last 2 of 2)")[1]
    assert events.index("Old") < events.index("Imported"), "oldest first"


def test_trace_says_what_it_could_not_read() -> None:
    text = _traced(resource=Lookup(problem="cannot reach host prod: refused"))
    assert "not read: cannot reach host prod: refused" in text
    assert "not found on the host" in _traced(resource=Lookup())


def test_trace_flags_another_incarnation_on_the_host() -> None:
    text = _traced(
        resource=Lookup({"metadata": {"uid": "h-2", "generation": "1", "revision": "1"}})
    )
    assert "the host serves uid h-2, the CR is bound to h-1" in text


def test_trace_of_a_pending_operation_and_few_events() -> None:
    cr = {
        "metadata": {"name": "logs", "namespace": "apps", "uid": "cr-1"},
        "status": {"pendingOperationId": "op-7", "pendingOperationVerb": "Update"},
    }
    operation = Lookup(
        {
            "verb": "update",
            "state": "failed",
            "space": "team-a",
            "name": "logs",
            "error": {"code": "quota_exceeded", "message": "no room"},
        }
    )
    text = _traced(cr=cr, operation=operation, event_count=1)
    assert "none recorded: nothing was sent" in text
    assert "op-7 (Update)\n  update failed on team-a/logs\n  error quota_exceeded: no room" in text
    assert "Events (last 1 of 2)" in text and "Old" not in text.split("Events")[1]


def test_trace_shows_a_paused_cr() -> None:
    cr = {"metadata": {"name": "logs", "annotations": {"takoform.io/paused": "true"}}}
    assert 'paused (takoform.io/paused: "true")' in _traced(cr=cr)


def test_the_remedy_column_comes_from_the_recorded_remedies_not_the_prose() -> None:
    body = {
        "metadata": {"name": "logs", "namespace": "apps"},
        "status": {
            "conditions": [
                {"type": "Blocked", "status": "True", "reason": "NameTaken", "message": "m"}
            ],
            "remedies": [
                {"does": "delete this CR", "command": "kubectl delete b/logs -n apps"},
                {"does": "or use another name: delete this CR first"},
            ],
        },
    }
    (row,) = blocked_rows(BUCKET, [body])
    assert row.remedy == (
        "(1) delete this CR: kubectl delete b/logs -n apps ; (2) or use another name: delete "
        "this CR first"
    )


HOSTILE = "ok\x1b[2J\x1b]0;title\x07\nkube-system  secret/admin  Fake  run-this\u202egnp.exe"


def test_tenant_strings_reach_the_terminal_as_text() -> None:
    # A condition message or remedy is a tenant's string: no escape sequence, no bidi override,
    # and no line of its own that could fake a row of the table.
    body = {
        "metadata": {"name": "logs", "namespace": "apps"},
        "status": {
            "conditions": [
                {"type": "Blocked", "status": "True", "reason": "NameTaken", "message": HOSTILE}
            ],
        },
    }
    report = blocked_report(blocked_rows(BUCKET, [body]), None)
    assert len(report.splitlines()) == 2, report
    assert not any(ord(c) < 32 or c == "\u202e" for c in report.replace("\n", ""))
    assert "\\x1b[2J" in report and "\\n" in report and "\\u202e" in report
    traced = trace_report(
        Trace(
            BUCKET,
            body,
            host="default",
            resource=Lookup(),
            operation=Lookup(),
            events=[{"type": "Warning", "reason": "X", "message": HOSTILE}],
            event_count=5,
        )
    )
    assert "\x1b" not in traced and "\u202e" not in traced and "\x07" not in traced
    assert not any(line.startswith("kube-system") for line in traced.splitlines())


# -- bindings -----------------------------------------------------------------------------------


def _binding(
    name: str,
    phase: Phase,
    claim: ClaimRef | None = None,
    last_owner: ClaimRef | None = None,
    space: str = "team-a",
) -> Binding:
    ref = FormRef(BUCKET.api_version, BUCKET.kind, "1.1.0", "sha256:" + "0" * 64)
    return Binding(
        Identity(space, BUCKET, name, "prod"),
        phase,
        claim,
        ref,
        Requested(space, name),
        "h-1",
        last_owner,
        "17",
    )


def test_the_bindings_table_shows_owners_reservations_last_owners_and_unreadable_objects() -> None:
    items = [
        _binding("logs", Phase.BOUND, ClaimRef("team-a", "logs", "u-1")).to_json(),
        _binding("data", Phase.BOUND, ClaimRef("team-a", "data")).to_json(),
        _binding("old", Phase.RELEASED, None, ClaimRef("team-a", "old", "u-2")).to_json(),
        _binding(
            "gone", Phase.LOST, ClaimRef("team-b", "next"), ClaimRef("team-a", "gone")
        ).to_json(),
        # Readable by nobody: no resourceName, and a phase no operator writes.
        {
            "metadata": {"name": "tb-typo"},
            "spec": {"host": "prod", "space": "team-a", "phase": "Taken"},
        },
        {"metadata": {"name": "tb-worse"}, "spec": ["not", "a", "spec"]},
    ]
    report = bindings_report(binding_rows(items))
    lines = [" ".join(line.split()) for line in report.splitlines()]
    name = {i: items[i]["metadata"]["name"] for i in range(4)}
    assert lines == [
        "NAME PHASE HOST SPACE KIND RESOURCE OWNER LAST OWNER",
        "tb-worse Invalid <none> -",
        "tb-typo Invalid prod team-a <none> -",
        f"{name[1]} Bound prod team-a Bucket data team-a/data (reserved) -",
        f"{name[3]} Lost prod team-a Bucket gone team-b/next (reserved) team-a/gone",
        f"{name[0]} Bound prod team-a Bucket logs team-a/logs -",
        f"{name[2]} Released prod team-a Bucket old <none> team-a/old",
    ]
    assert bindings_report([]) == "No TakoformBindings."
    document = bindings_document(binding_rows(items))
    assert [" ".join(str(v) for v in item.values() if v) for item in document["items"]] == [
        " ".join(line.split()) for line in lines[1:]
    ], "the document has the table's rows, in its order"


def test_the_bindings_table_escapes_what_it_prints() -> None:
    body = _binding("logs", Phase.BOUND, ClaimRef("team-a", "logs", "u")).to_json()
    body["spec"]["space"] = HOSTILE
    body["spec"]["claimRef"]["name"] = "x\x1b[31mred"
    report = bindings_report(binding_rows([body]))
    assert len(report.splitlines()) == 2, report
    assert not any(ord(c) < 32 or c == "\u202e" for c in report.replace("\n", ""))
    assert "\\x1b[2J" in report and "\\u202e" in report and "x\\x1b[31mred" in report


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("tb-0123abc", "tb-0123abc"),
        ("takoformbinding/tb-1", "tb-1"),
        ("takoformbinding.operator.takoform.io/tb-1", "tb-1"),
        ("tkb/tb-1", "tb-1"),
    ],
)
def test_a_binding_is_named_as_kubectl_prints_it(text: str, name: str) -> None:
    assert binding_name_arg(text) == name


@pytest.mark.parametrize("text", ["", "TB-1", "a/b/c", "bucket/tb-1", "x" * 254])
def test_a_binding_name_that_is_no_object_name_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError, match="not a TakoformBinding name"):
        binding_name_arg(text)


def test_to_is_a_namespace_and_a_name_without_uid() -> None:
    assert claim_arg("team-a/logs.eu") == ClaimRef("team-a", "logs.eu")
    for text in ("team-a", "/logs", "team-a/", "Team/logs", "a/b/c", "a" * 64 + "/x", "a/\x1b"):
        with pytest.raises(UsageError, match="--to wants NAMESPACE/NAME"):
            claim_arg(text)


def test_only_a_binding_bound_to_a_crs_uid_is_refused() -> None:
    owned = _binding("logs", Phase.BOUND, ClaimRef("team-a", "logs", "u-1"))
    refusal = release_refusal("tb-x", owned)
    assert refusal == (
        "tb-x is bound to team-a/logs; delete that CR with deletionPolicy Orphan first: "
        "kubectl patch buckets.storage.takoform.io/logs -n team-a --type=merge "
        '-p \'{"spec":{"deletionPolicy":"Orphan"}}\' && '
        "kubectl delete buckets.storage.takoform.io/logs -n team-a"
    )
    for free in (
        _binding("logs", Phase.BOUND, ClaimRef("team-a", "logs")),
        _binding("logs", Phase.BOUND),
        _binding("logs", Phase.RELEASED, None, ClaimRef("team-a", "logs", "u-1")),
        _binding("logs", Phase.LOST, ClaimRef("team-b", "x"), ClaimRef("team-a", "logs", "u-1")),
    ):
        assert release_refusal("tb-x", free) is None, free


def test_a_reservation_changes_the_claim_ref_and_nothing_else() -> None:
    released = _binding("logs", Phase.RELEASED, None, ClaimRef("team-a", "logs", "u-1"))
    body = released.to_json()
    body["metadata"] |= {
        "uid": "obj-uid",
        "managedFields": [{"manager": "x"}],
        "annotations": {"a": "b"},
    }
    body["spec"]["someFutureField"] = "kept"
    labels = dict(body["metadata"]["labels"])
    body["metadata"]["labels"][SLOT_LABEL] = "17"  # hash sharding: whoever it goes to sees it
    document = reserved_document(body, ClaimRef("team-c", "new"))
    assert document["metadata"] == {
        **{k: v for k, v in body["metadata"].items() if k != "managedFields"},
        "labels": labels,
    }
    assert body["metadata"]["labels"][SLOT_LABEL] == "17", "the document read is left as it was"
    assert document["metadata"]["resourceVersion"] == "17", "the precondition of the replace"
    assert document["spec"] == {**body["spec"], "claimRef": {"namespace": "team-c", "name": "new"}}
    assert "claimRef" not in body["spec"], "the document read is left as it was"
    assert binding_from_json(document).claim == ClaimRef("team-c", "new")
    assert reserved_message("tb-x", released, ClaimRef("team-c", "new")) == (
        "TakoformBinding tb-x reserved for team-c/new: only the Bucket 'new' in namespace 'team-c' "
        "may bind Bucket 'logs' in space 'team-a' on host 'prod' (phase Released kept, last owner "
        "team-a/logs)."
    )


def test_what_a_deletion_says() -> None:
    lost = _binding("logs", Phase.LOST, ClaimRef("team-b", "x"), ClaimRef("team-a", "logs"))
    assert unbound_message("tb-x", lost) == (
        "TakoformBinding tb-x deleted (it was Lost, reserved for team-b/x, last owner "
        "team-a/logs): Bucket 'logs' in space 'team-a' on host 'prod' is unbound; any namespace "
        "granted space 'team-a' on host 'prod' may import it."
    )
    tricky = _binding("logs", Phase.RELEASED, space="a\u202eb")
    assert "\u202e" not in unbound_message("tb-x", tricky)
