"""Decision 0017 rules 1-7 against the reference host running as a real process over HTTP.

Each test names the rule it proves. The reconcile runs exactly as in the operator
(`service.reconcile` over the real httpx client, one host granted to every namespace); only the
CR is simulated (`SimulatedCr`).
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import builders
import pytest
import yaml
from builders import BUCKET, REGISTRY, SPEC
from memory_bindings import MemoryBindings
from waiting import await_settled

from takoform_operator.core.actions import Create, Delete, Update
from takoform_operator.core.conditions import ConditionType, Reason
from takoform_operator.core.import_id import canonical_import_id
from takoform_operator.core.state import Desired, State
from takoform_operator.host_client.client import HostClient
from takoform_spec.catalog import DEFINITIONS_DIR, load_definition_file
from takoform_spec.identity import FormRef

from .harness import SimulatedCr, SpyPort, condition, message

pytestmark = pytest.mark.host


def ref(version: str) -> FormRef:
    return next(r for r in REGISTRY.known_refs(BUCKET) if r.definition_version == version)


def desired(name: str, **changes: Any) -> Desired:
    """A fresh CR (a new uid) wanting the host resource `name`."""
    return builders.desired(cr_uid=f"cr-{uuid.uuid4()}", name=name, **changes)


@pytest.fixture
def host(host_factory: Any) -> Any:
    return host_factory(commit_delay=0.05)


@pytest.fixture
async def client(host: Any) -> AsyncIterator[HostClient]:
    async with HostClient(host.url, host.token, read_retries=2) as http:
        await http.ensure_space("team-a")
        yield http


def admin_target(name: str) -> dict[str, str]:
    return {"space": "team-a", "apiVersion": BUCKET.api_version, "kind": BUCKET.kind, "name": name}


# -- rule 1, 2, 3: a Form line advancing ------------------------------------------------------


def _synthetic_minor(tmp_path: Path) -> Path:
    """Bucket 1.2.0: an additive minor of 1.1.0 (one new optional field), as a package file."""
    source = DEFINITIONS_DIR / "storage.takoform.io" / "bucket-1.1.0.yaml"
    document = yaml.safe_load(source.read_text(encoding="utf-8"))
    document["definitionVersion"] = "1.2.0"
    document["fields"].append(
        {"name": "storageClass", "type": "string", "description": "Storage class of new objects."}
    )
    path = tmp_path / "bucket-1.2.0.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


async def test_rule1_line_advancing_keeps_old_resources_addressable_as_themselves(
    host_factory: Any, tmp_path: Path
) -> None:
    """Rule 1/2/3: registering 1.2.0 and moving DefaultCreates leaves an existing 1.1.0 resource
    read and updated under 1.1.0 (with 1.1.0's codec), while a new resource is created under
    1.2.0."""
    package = _synthetic_minor(tmp_path)
    host = host_factory(commit_delay=0.05, packages=(package,))
    async with HostClient(host.url, host.token) as http:
        await http.ensure_space("team-a")
        spy = SpyPort(http)
        old = SimulatedCr(desired("old-bucket"))
        await old.converge(spy, REGISTRY)
        assert old.state.form_ref == ref("1.1.0")

        advanced = REGISTRY.register(load_definition_file(package), default_create=True)
        new_ref = advanced.default_create_ref(BUCKET)
        assert new_ref is not None and new_ref.definition_version == "1.2.0"
        assert REGISTRY.default_create_ref(BUCKET) == ref("1.1.0"), "the snapshot is immutable"

        old.change(parameters={**SPEC, "sizeGiB": 11})
        outcome = await old.converge(spy, advanced)
        assert condition(outcome, ConditionType.READY) is Reason.AVAILABLE
        assert old.state.form_ref == ref("1.1.0"), "still addressed as itself"
        updates = [m for m in spy.mutations if isinstance(m, Update)]
        assert updates and all(m.target.form_ref == ref("1.1.0") for m in updates)
        served = await http.get_resource("team-a", ref("1.1.0"), "old-bucket")
        assert served.spec["sizeGiB"] == 11

        fresh = SimulatedCr(desired("new-bucket"))
        await fresh.converge(spy, advanced)
        assert fresh.state.form_ref == new_ref
        creates = [m for m in spy.mutations if isinstance(m, Create)]
        assert [m.target.form_ref for m in creates] == [ref("1.1.0"), new_ref]


async def test_rule1_pin_creates_under_the_pinned_breaking_major(client: HostClient) -> None:
    """Rule 1/3: a supported pin is a create ref; the spec is encoded with 2.0.0's own codec."""
    major = ref("2.0.0")
    cr = SimulatedCr(
        desired(
            "pinned",
            pin=(major.definition_version, major.schema_digest),
            parameters={"region": "eu-west-1", "quota": "500Gi", "labels": ["team=data"]},
        )
    )
    outcome = await cr.converge(SpyPort(client), REGISTRY)
    assert condition(outcome, ConditionType.READY) is Reason.AVAILABLE
    assert cr.state.form_ref == major


# -- rule 4: fail closed -----------------------------------------------------------------------


async def test_rule4_state_bound_to_an_unknown_ref_fails_closed_and_sends_nothing(
    client: HostClient,
) -> None:
    unknown = FormRef(BUCKET.api_version, BUCKET.kind, "1.9.0", "sha256:" + "ab" * 32)
    state = State(form_ref=unknown, space="team-a", name="ghost", uid="u-1", generation="1")
    for deleting in (False, True):
        spy = SpyPort(client)
        cr = SimulatedCr(desired("ghost", deleting=deleting), state)
        outcome = await cr.reconcile(spy, REGISTRY)
        assert condition(outcome, ConditionType.BLOCKED) is Reason.FORM_REF_UNSUPPORTED
        text = message(outcome, ConditionType.BLOCKED)
        assert str(unknown) in text
        assert all(str(known) in text for known in REGISTRY.known_refs(BUCKET))
        assert spy.calls == [], "nothing read, updated or deleted under any other ref"
        assert cr.state == state, "state kept"
        assert not outcome.finalized


# -- rule 6: uid mismatch and its three remedies ---------------------------------------------


async def _blocked_by_recreate(host: Any, client: HostClient, name: str) -> tuple[SimulatedCr, str]:
    spy = SpyPort(client)
    cr = SimulatedCr(desired(name))
    await cr.converge(spy, REGISTRY)
    original = cr.state.uid
    assert original is not None
    replacement = host.admin("POST", "/admin/v1/resources/recreate", admin_target(name)).json()
    new_uid = replacement["metadata"]["uid"]
    assert new_uid != original
    spy.mutations.clear()
    outcome = await cr.reconcile(spy, REGISTRY)
    assert condition(outcome, ConditionType.BLOCKED) is Reason.UID_MISMATCH
    text = message(outcome, ConditionType.BLOCKED)
    assert original in text and new_uid in text
    assert "import" in text and "restore" in text and "delete" in text, "three remedies"
    assert cr.state.uid == original, "state kept"
    # No mutation while blocked, even with a changed spec, and a CR deletion never deletes it.
    cr.change(parameters={**SPEC, "sizeGiB": 99})
    await cr.reconcile(spy, REGISTRY)
    cr.desired = replace(cr.desired, deleting=True)
    outcome = await cr.reconcile(spy, REGISTRY)
    assert not outcome.finalized
    assert spy.mutations == []
    cr.desired = replace(cr.desired, deleting=False)
    return cr, new_uid


async def test_rule6_remedy_import_the_new_incarnation(host: Any, client: HostClient) -> None:
    cr, new_uid = await _blocked_by_recreate(host, client, "remedy-import")
    cr.desired = replace(cr.desired, accept_uid=new_uid)
    outcome = await cr.converge(SpyPort(client), REGISTRY)
    assert condition(outcome, ConditionType.BLOCKED) is None
    assert condition(outcome, ConditionType.READY) is Reason.AVAILABLE
    assert cr.state.uid == new_uid


async def test_rule6_remedy_restore_the_prior_incarnation(host: Any, client: HostClient) -> None:
    spy = SpyPort(client)
    cr = SimulatedCr(desired("remedy-restore"))
    await cr.converge(spy, REGISTRY)
    original = cr.state.uid
    backup = host.db_path.parent / "backup"
    backup.mkdir()
    host.stop()
    for file in host.db_path.parent.glob(host.db_path.name + "*"):
        shutil.copy2(file, backup / file.name)
    host.start()
    host.admin("POST", "/admin/v1/resources/recreate", admin_target("remedy-restore"))
    outcome = await cr.reconcile(spy, REGISTRY)
    assert condition(outcome, ConditionType.BLOCKED) is Reason.UID_MISMATCH
    host.stop()  # the host operator restores yesterday's backup: the prior incarnation is back
    for file in host.db_path.parent.glob(host.db_path.name + "*"):
        file.unlink()
    for file in backup.iterdir():
        shutil.copy2(file, host.db_path.parent / file.name)
    host.start()
    outcome = await cr.converge(spy, REGISTRY)
    assert condition(outcome, ConditionType.BLOCKED) is None
    assert condition(outcome, ConditionType.READY) is Reason.AVAILABLE
    assert cr.state.uid == original


async def test_rule6_remedy_delete_the_replacement(host: Any, client: HostClient) -> None:
    cr, new_uid = await _blocked_by_recreate(host, client, "remedy-delete")
    host.admin("POST", "/admin/v1/resources/delete", admin_target("remedy-delete"))
    outcome = await cr.converge(SpyPort(client), REGISTRY)
    assert condition(outcome, ConditionType.READY) is Reason.AVAILABLE
    assert cr.state.uid not in (None, new_uid), "ordinary drift repair created it anew"
    served = await client.get_resource("team-a", ref("1.1.0"), "remedy-delete")
    assert served.metadata.uid == cr.state.uid


# -- rule 7: pending operations ----------------------------------------------------------------


async def test_rule7_running_create_whose_resource_404s_is_not_deletion(
    host: Any, client: HostClient
) -> None:
    spy = SpyPort(client)
    cr = SimulatedCr(desired("slow"))
    host.set_faults(stuckOperations=True)
    try:
        first = await cr.reconcile(spy, REGISTRY)
        assert cr.state.pending is not None
        for _ in range(3):
            outcome = await cr.reconcile(spy, REGISTRY)
            assert cr.state.pending == first.state.pending, "marker survives"
            assert condition(outcome, ConditionType.RECONCILING) is Reason.OPERATION_RUNNING
        assert await client.find_resource("team-a", ref("1.1.0"), "slow") is None
        assert len([m for m in spy.mutations if isinstance(m, Create)]) == 1, "no second create"
    finally:
        host.set_faults(stuckOperations=False)
    outcome = await cr.converge(spy, REGISTRY)
    assert condition(outcome, ConditionType.READY) is Reason.AVAILABLE
    assert cr.state.pending is None
    assert len([m for m in spy.mutations if isinstance(m, Create)]) == 1


async def test_rule7_expired_record_lets_the_resource_get_decide(
    host: Any, client: HostClient
) -> None:
    spy = SpyPort(client)
    present = SimulatedCr(desired("expired-present"))
    await present.reconcile(spy, REGISTRY)  # accepted; marker recorded
    operation_id = present.state.pending.operation_id  # type: ignore[union-attr]
    await await_settled(client, operation_id)
    host.admin("POST", "/admin/v1/operations/expire", {"ids": [operation_id]})
    outcome = await present.converge(spy, REGISTRY)
    assert condition(outcome, ConditionType.READY) is Reason.AVAILABLE
    assert present.state.pending is None

    absent = SimulatedCr(desired("expired-absent"))
    await absent.reconcile(spy, REGISTRY)
    operation_id = absent.state.pending.operation_id  # type: ignore[union-attr]
    await await_settled(client, operation_id)
    host.admin("POST", "/admin/v1/operations/expire", {"ids": [operation_id]})
    host.admin("POST", "/admin/v1/resources/delete", admin_target("expired-absent"))
    outcome = await absent.reconcile(spy, REGISTRY)
    assert absent.state.pending is None and absent.state.uid is None, "binding removed, target kept"
    assert condition(outcome, ConditionType.DRIFTED) is Reason.RESOURCE_DELETED


async def test_rule7_failed_operation_absent_means_state_removable(
    host: Any, client: HostClient
) -> None:
    spy = SpyPort(client)
    cr = SimulatedCr(desired("fails-once"))
    host.set_faults(failNextOperations=1)
    await cr.reconcile(spy, REGISTRY)
    await await_settled(client, cr.state.pending.operation_id)  # type: ignore[union-attr]
    outcome = await cr.reconcile(spy, REGISTRY)
    assert condition(outcome, ConditionType.DEGRADED) is Reason.OPERATION_FAILED
    assert cr.state.uid is None and cr.state.pending is None, "binding removed, target kept"
    assert cr.state.attempt == 1, "the next create gets a fresh key"
    outcome = await cr.converge(spy, REGISTRY)
    assert condition(outcome, ConditionType.READY) is Reason.AVAILABLE
    keys = [m.key for m in spy.mutations if isinstance(m, Create)]
    assert len(keys) == 2 and keys[0] != keys[1]


async def test_rule7_settled_create_whose_uid_was_never_recorded_is_adopted_by_its_key(
    host_factory: Any,
) -> None:
    """Rule 7, unknown uid: a host whose 202 names no resource uid leaves state bound without
    one. Once the record has expired, the exact GET finds a resource it cannot compare uids with;
    our own create key on it proves it ours, so it is adopted - not re-created, not blocked."""
    host = host_factory(commit_delay=0.05, misbehaviours=("omit-result-uid",))
    async with HostClient(host.url, host.token) as http:
        await http.ensure_space("team-a")
        spy = SpyPort(http)
        cr = SimulatedCr(desired("unrecorded"))
        await cr.reconcile(spy, REGISTRY)
        assert cr.state.pending is not None and cr.state.uid is None, "the 202 named no uid"
        operation_id = cr.state.pending.operation_id
        await await_settled(http, operation_id)
        host.admin("POST", "/admin/v1/operations/expire", {"ids": [operation_id]})
        outcome = await cr.reconcile(spy, REGISTRY)
        served = await http.get_resource("team-a", ref("1.1.0"), "unrecorded")
        [create] = [m for m in spy.mutations if isinstance(m, Create)]
        assert served.metadata.creation_idempotency_key == create.key, "the proof"
        assert cr.state.uid == served.metadata.uid, "adopted"
        assert cr.state.pending is None, "the record expired: the marker is cleared"
        assert condition(outcome, ConditionType.READY) is Reason.AVAILABLE
        assert condition(outcome, ConditionType.BLOCKED) is None


async def test_rule7_running_create_visible_early_with_our_key_is_adopted_marker_kept(
    host_factory: Any,
) -> None:
    """Rule 7, still running, unknown uid: a host that shows the resource before its operation
    commits (and names no uid on the 202) is read while the create runs. Our key on it proves it
    ours: state takes its uid, the marker survives until the operation settles."""
    host = host_factory(
        commit_delay=0.05, misbehaviours=("omit-result-uid", "visible-before-commit")
    )
    async with HostClient(host.url, host.token) as http:
        await http.ensure_space("team-a")
        spy = SpyPort(http)
        cr = SimulatedCr(desired("early"))
        host.set_faults(stuckOperations=True)
        try:
            await cr.reconcile(spy, REGISTRY)
            pending = cr.state.pending
            assert pending is not None and cr.state.uid is None, "the 202 named no uid"
            outcome = await cr.reconcile(spy, REGISTRY)
            served = await http.get_resource("team-a", ref("1.1.0"), "early")
            assert (await http.get_operation(pending.operation_id)).state == "running"
            assert cr.state.uid == served.metadata.uid, "adopted on the proof of our key"
            assert cr.state.pending == pending, "nothing committed: the marker survives"
            assert condition(outcome, ConditionType.RECONCILING) is Reason.OPERATION_RUNNING
            assert condition(outcome, ConditionType.BLOCKED) is None
        finally:
            host.set_faults(stuckOperations=False)
        outcome = await cr.converge(spy, REGISTRY)
        assert condition(outcome, ConditionType.READY) is Reason.AVAILABLE
        assert cr.state.pending is None and cr.state.uid == served.metadata.uid
        assert len([m for m in spy.mutations if isinstance(m, Create)]) == 1, "no second create"


# -- rule 5: import ----------------------------------------------------------------------------


async def test_rule5_import_by_json_id_keeps_the_older_definition(client: HostClient) -> None:
    older = ref("1.0.0")
    operation = await client.create("team-a", older, "legacy", SPEC, key="outside:1")
    await await_settled(client, operation.id)
    import_id = canonical_import_id("team-a", "legacy", older)
    spy = SpyPort(client)
    cr = SimulatedCr(desired("legacy", import_id=import_id, parameters={**SPEC, "sizeGiB": 12}))
    outcome = await cr.converge(spy, REGISTRY)
    assert condition(outcome, ConditionType.READY) is Reason.AVAILABLE
    assert cr.state.form_ref == older, "not rebound to the default create ref 1.1.0"
    assert cr.state.uid == operation.resource_uid
    assert not any(isinstance(m, Create) for m in spy.mutations), "import never creates"
    assert all(m.target.form_ref == older for m in spy.mutations)
    served = await client.get_resource("team-a", older, "legacy")
    assert served.spec["sizeGiB"] == 12, "the desired spec then reconciled as usual"


async def test_rule5_import_of_an_undecodable_id_is_refused(client: HostClient) -> None:
    bogus = {
        "space": "team-a",
        "apiVersion": BUCKET.api_version,
        "kind": BUCKET.kind,
        "definitionVersion": "1.0.0",
        "schemaDigest": "sha256:" + "0" * 64,
        "name": "legacy",
    }
    spy = SpyPort(client)
    cr = SimulatedCr(desired("legacy", import_id=json.dumps(bogus)))
    outcome = await cr.reconcile(spy, REGISTRY)
    assert condition(outcome, ConditionType.BLOCKED) is Reason.IMPORT_REFUSED
    assert spy.calls == [] and cr.state.form_ref is None


async def test_name_taken_by_someone_else_is_never_adopted(client: HostClient) -> None:
    operation = await client.create("team-a", ref("1.1.0"), "taken", SPEC, key="someone:else")
    await await_settled(client, operation.id)
    spy = SpyPort(client)
    cr = SimulatedCr(desired("taken"))
    outcome = await cr.converge(spy, REGISTRY)
    assert condition(outcome, ConditionType.BLOCKED) is Reason.NAME_TAKEN
    assert '"name":"taken"' in message(outcome, ConditionType.BLOCKED), "import id remedy"
    assert cr.state.uid is None and spy.mutations == []


async def test_a_deletion_deletes_the_incarnation_it_is_bound_to(client: HostClient) -> None:
    # An Orphan deletion sends nothing at all: its rule is a unit table (test_policy.py).
    spy = SpyPort(client)
    gone = SimulatedCr(desired("gone"))
    await gone.converge(spy, REGISTRY)
    gone.desired = replace(gone.desired, deleting=True)
    outcome = await gone.converge(spy, REGISTRY)
    assert outcome.finalized
    deletes = [m for m in spy.mutations if isinstance(m, Delete)]
    assert [d.expected_uid for d in deletes] == [gone.state.uid]
    assert await client.find_resource("team-a", ref("1.1.0"), "gone") is None


async def test_a_vanished_import_is_never_created_again_nor_rebound_to_a_stranger(
    host: Any, client: HostClient
) -> None:
    """0011's rejected alternative: delete/recreate must never silently rebind an import. The
    imported resource vanishes (Blocked ImportedResourceGone, its uid kept, nothing created);
    someone re-creates the name (a new uid): UidMismatch with the accept-uid remedy, not a
    silent bind."""
    owner = SimulatedCr(desired("shared-import"))
    await owner.converge(SpyPort(client), REGISTRY)
    import_id = canonical_import_id("team-a", "shared-import", ref("1.1.0"))
    spy = SpyPort(client)
    cr = SimulatedCr(desired("shared-import", import_id=import_id))
    await cr.converge(spy, REGISTRY)
    imported_uid = cr.state.uid
    assert imported_uid == owner.state.uid
    host.admin("POST", "/admin/v1/resources/delete", admin_target("shared-import"))
    outcome = await cr.converge(spy, REGISTRY)
    assert condition(outcome, ConditionType.BLOCKED) is Reason.IMPORTED_RESOURCE_GONE
    assert cr.state.uid == imported_uid, "the uid it was bound to is kept"
    assert spy.mutations == [], "an import is never created again"
    created = await client.create("team-a", ref("1.1.0"), "shared-import", SPEC, key="stranger")
    await await_settled(client, created.id)
    outcome = await cr.converge(spy, REGISTRY)
    assert condition(outcome, ConditionType.BLOCKED) is Reason.UID_MISMATCH
    assert imported_uid in message(outcome, ConditionType.BLOCKED)
    assert "accept-uid" in message(outcome, ConditionType.BLOCKED)
    assert cr.state.uid == imported_uid and spy.mutations == []


async def test_an_upgrade_with_two_recorded_claims_gives_the_binding_to_the_creator(
    client: HostClient,
) -> None:
    """Label shards of a release without bindings could both record one target. After the
    upgrade, whichever CR binds first, the host evidence (the creation key) decides, never the
    order or the CRs' age."""
    creator = SimulatedCr(desired("raced"))
    await creator.converge(SpyPort(client), REGISTRY)
    assert creator.state.uid is not None
    upgraded = MemoryBindings()  # the API server right after the upgrade: no binding yet
    rival = SimulatedCr(desired("raced"), replace(creator.state), bindings=upgraded)
    creator.bindings = upgraded
    await rival.reconcile(SpyPort(client), REGISTRY)  # binds first
    (binding,) = upgraded.objects.values()
    assert binding.claim is not None and binding.claim.uid == rival.desired.cr_uid
    outcome = await creator.reconcile(SpyPort(client), REGISTRY)
    assert condition(outcome, ConditionType.READY) is Reason.AVAILABLE
    (binding,) = upgraded.objects.values()
    assert binding.claim is not None and binding.claim.uid == creator.desired.cr_uid
    spy = SpyPort(client)
    outcome = await rival.reconcile(spy, REGISTRY)
    assert condition(outcome, ConditionType.BLOCKED) is Reason.ALREADY_MANAGED
    assert spy.mutations == []
