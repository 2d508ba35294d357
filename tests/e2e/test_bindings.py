"""Bindings on the real API server with the real host: who owns a host resource is one
TakoformBinding, created on the API server after the grant check; every race is decided there.

Each team runs in a namespace of its own, served by one operator process for both, or by one
per namespace (`--namespace`): two namespace shards, which no in-memory ranking could arbitrate
between.

- Hand-off: a CR released with deletionPolicy Orphan goes to an import of its own namespace,
  never to another namespace's import that was waiting for it.
- Two imports of one unbound resource, and two creates of one name, from two namespaces at the
  same instant: exactly one owner, and nothing sent by the other.

That a CR of a namespace without a grant writes no binding, and so never keeps a granted CR from
its name, is a rule of the core: tests/unit/test_tenancy.py, and the model's regression
test_a_cr_without_a_grant_never_keeps_a_granted_cr_from_its_name.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures_kube import FORCED, UNPROTECTED, KubeCluster, drop_namespace, wait_until
from manifests import bucket
from operator_process import Operator, condition_of, cr_status, is_ready, operator_process, serving
from processes import free_port
from tenancy import binding_of, grant_manifest

from takoform_operator.core.import_id import canonical_import_id
from takoform_operator.registry_data import load_registry
from takoform_spec.identity import FormLine

pytestmark = [pytest.mark.kube, pytest.mark.host]

SPACE = "team-a"
BUCKET = FormLine("storage.takoform.io/v1", "Bucket")
REF = load_registry().default_create_ref(BUCKET)
assert REF is not None


class Teams:
    """Two namespaces, one host, an operator process per namespace, grants as each test says."""

    def __init__(
        self, cluster: KubeCluster, host: Any, namespaces: tuple[str, str], tmp_path: Path
    ) -> None:
        self.cluster, self.host, self.namespaces = cluster, host, namespaces
        self._tmp = tmp_path
        self._stack = contextlib.ExitStack()
        self.grants: list[str] = []

    def grant(self, *namespaces: str) -> None:
        name = f"{self.namespaces[0]}-bindings"
        self.cluster.apply(grant_manifest(name, "default", [SPACE], list(namespaces)))
        self.grants.append(name)

    def start(self, *, one_process: bool = False) -> None:
        """An operator process per namespace (namespace shards), or `one_process` for every
        namespace (where a tie-break in one process's memory used to decide)."""
        for namespace in (None,) if one_process else self.namespaces:
            port = free_port()
            log = self._tmp / f"operator-{namespace or 'all'}.log"
            process = self._stack.enter_context(
                operator_process(
                    self.cluster.kubeconfig,
                    self.host,
                    namespace,
                    log,
                    METRICS_PORT=str(port),
                    POLL_READY_SECONDS="2",
                )
            )
            self._await_serving(Operator(process, log, f"http://127.0.0.1:{port}/metrics"))

    def owner_ready(self, name: str) -> str:
        """Both namespaces granted, one operator process for both, and the first namespace's
        Bucket `name` Ready: its host uid."""
        owners, others = self.namespaces
        self.grant(owners, others)
        self.start(one_process=True)
        self.apply(owners, bucket(name))
        self.wait_ready(owners, name)
        return str(cr_status(self.cluster, owners, name)["uid"])

    def vanish(self, namespace: str, name: str) -> None:
        """Delete the CR and remove its finalizer by hand: it goes without its operator's
        deletion."""
        self.cluster.kubectl("delete", "bucket", name, "--wait=false", namespace=namespace)
        gone = json.dumps({"metadata": {"finalizers": None}})
        self.cluster.kubectl("patch", "bucket", name, "--type=merge", "-p", gone,
                             namespace=namespace)  # fmt: skip

    def stop(self) -> None:
        """Stop the operator processes (the grants stay)."""
        self._stack.close()
        self._stack = contextlib.ExitStack()

    @staticmethod
    def _await_serving(running: Operator) -> None:
        wait_until(lambda: serving(running), "the operator's metrics endpoint", timeout=30)

    def apply(self, namespace: str, manifest: str) -> None:
        self.cluster.kubectl("apply", "-f", "-", input=manifest, namespace=namespace)

    def blocked(self, namespace: str, name: str) -> dict[str, Any]:
        condition = condition_of(cr_status(self.cluster, namespace, name), "Blocked")
        return condition if condition.get("status") == "True" else {}

    def wait_blocked(self, namespace: str, name: str, reason: str) -> dict[str, Any]:
        wait_until(
            lambda: self.blocked(namespace, name).get("reason") == reason,
            f"{namespace}/{name} Blocked {reason}",
        )
        return self.blocked(namespace, name)

    def wait_ready(self, namespace: str, name: str) -> None:
        wait_until(lambda: is_ready(self.cluster, namespace, name), f"{namespace}/{name} Ready")

    def binding(self, name: str) -> dict[str, Any]:
        found = binding_of(self.cluster, "Bucket", name)
        assert found is not None, f"no binding of {name}"
        return found

    def mutations(self) -> list[tuple[str, str]]:
        """(verb, name) of every operation the host accepted in the space."""
        with self.host.api() as api:
            answer = api.get("/v1alpha3/operations", params={"space": SPACE})
        answer.raise_for_status()
        return [(op["verb"], op["name"]) for op in answer.json()["items"]]

    def create_out_of_band(self, name: str) -> str:
        """A resource someone created on the host without any CR; returns its uid."""
        assert REF is not None
        path = f"/v1alpha3/spaces/{SPACE}/forms/storage.takoform.io/v1/Bucket/resources/{name}"
        query = {"definitionVersion": REF.definition_version, "schemaDigest": REF.schema_digest}
        body = {"spec": {"region": "eu-west-1", "sizeGiB": 10}}
        with self.host.api() as api:
            made = api.put(path, params=query, json=body, headers={"If-None-Match": "*"})
            made.raise_for_status()

            def served() -> str | None:
                found = api.get(path, params=query)
                return found.json()["metadata"]["uid"] if found.status_code == 200 else None

            wait_until(lambda: served() is not None, f"{name} created on the host")
            uid = served()
        assert uid is not None
        return uid

    def close(self) -> None:
        self._stack.close()
        for name in self.grants:
            self.cluster.kubectl("delete", "takoformspacegrant", name, "--wait=false", check=False)


@pytest.fixture
def teams(
    kube_cluster: KubeCluster,
    kube_crds: list[Any],
    kube_namespace: str,
    host_factory: Any,
    tmp_path: Path,
) -> Iterator[Teams]:
    other = f"{kube_namespace[:55]}-b"
    kube_cluster.kubectl("create", "namespace", other)
    host = host_factory(commit_delay=0.05)
    with host.api() as api:
        api.put(f"/v1alpha3/spaces/{SPACE}").raise_for_status()
    made = Teams(kube_cluster, host, (kube_namespace, other), tmp_path)
    try:
        yield made
    finally:
        made.close()
        drop_namespace(kube_cluster, other)


def test_a_released_resource_goes_to_its_own_namespace_not_to_a_waiting_import(
    teams: Teams,
) -> None:
    owners, others = teams.namespaces
    uid = teams.owner_ready("app-data")
    import_id = canonical_import_id(SPACE, "app-data", REF)
    teams.apply(others, bucket("app-data", importId=import_id))  # pre-staged by another team
    teams.wait_blocked(others, "app-data", "AlreadyManaged")

    # The owner follows the release remedy: Orphan, then delete.
    patch = json.dumps({"spec": {"deletionPolicy": "Orphan"}})
    teams.cluster.kubectl("patch", "bucket", "app-data", "--type=merge", "-p", patch,
                          namespace=owners)  # fmt: skip
    teams.cluster.kubectl("delete", "bucket", "app-data", "--timeout=60s", namespace=owners)
    wait_until(lambda: teams.binding("app-data")["spec"]["phase"] == "Released", "Released")
    released = teams.binding("app-data")["spec"]
    assert released["lastOwner"]["namespace"] == owners and released["uid"] == uid
    assert "claimRef" not in released

    # The other team's import is woken by the release and stays Blocked: it sends nothing.
    blocked = teams.wait_blocked(others, "app-data", "AlreadyManaged")
    assert "released" in blocked["message"]
    assert not cr_status(teams.cluster, others, "app-data").get("uid"), "never bound"

    # An import from the last owner's namespace takes it back, with the uid the binding kept.
    teams.apply(owners, bucket("app-data-again", resourceName="app-data", importId=import_id))
    teams.wait_ready(owners, "app-data-again")
    assert cr_status(teams.cluster, owners, "app-data-again")["uid"] == uid
    claim = teams.binding("app-data")["spec"]["claimRef"]
    assert (claim["namespace"], claim["name"]) == (owners, "app-data-again")
    assert teams.blocked(others, "app-data")["reason"] == "AlreadyManaged"
    assert teams.mutations() == [("create", "app-data")], "never updated nor deleted"


@pytest.mark.parametrize("how", ["import", "create"])
def test_two_namespaces_at_the_same_instant_make_exactly_one_owner(teams: Teams, how: str) -> None:
    first, second = teams.namespaces
    teams.grant(first, second)
    spec: dict[str, Any] = {}
    if how == "import":
        teams.create_out_of_band("contended")  # unbound: any granted namespace may import it
        spec = {"importId": canonical_import_id(SPACE, "contended", REF)}
    for namespace in teams.namespaces:
        teams.apply(namespace, bucket("contended", **spec))
    teams.start()  # both operators find their CR at once and race for the binding

    def settled() -> tuple[bool, bool]:
        return tuple(  # type: ignore[return-value]
            is_ready(teams.cluster, ns, "contended")
            or teams.blocked(ns, "contended").get("reason") == "AlreadyManaged"
            for ns in teams.namespaces
        )

    wait_until(lambda: all(settled()), "both CRs Ready or AlreadyManaged")
    ready = [ns for ns in teams.namespaces if is_ready(teams.cluster, ns, "contended")]
    assert len(ready) == 1, f"exactly one owner, got {ready}"
    (loser,) = [ns for ns in teams.namespaces if ns not in ready]
    assert teams.blocked(loser, "contended")["reason"] == "AlreadyManaged"
    assert teams.binding("contended")["spec"]["claimRef"]["namespace"] == ready[0]
    assert not cr_status(teams.cluster, loser, "contended").get("uid")
    # One create: the out-of-band one (import) or the winner's; the loser sent nothing.
    assert teams.mutations() == [("create", "contended")]


def test_a_cr_that_vanished_leaves_its_binding_lost_for_its_restore_only(teams: Teams) -> None:
    owners, others = teams.namespaces
    uid = teams.owner_ready("kept")
    # Someone removes the finalizer by hand: the CR goes without the operator's deletion (it
    # is paused first, so the operator does not start the deletion meanwhile).
    teams.cluster.kubectl("annotate", "bucket", "kept", "takoform.io/paused=true",
                          namespace=owners)  # fmt: skip
    teams.vanish(owners, "kept")
    wait_until(lambda: teams.binding("kept")["spec"]["phase"] == "Lost", "the binding Lost")
    lost = teams.binding("kept")["spec"]
    assert lost["lastOwner"]["name"] == "kept" and lost["uid"] == uid
    # Another namespace's CR gets nothing; the restore (same namespace and name) re-binds.
    teams.apply(others, bucket("kept", importId=canonical_import_id(SPACE, "kept", REF)))
    teams.wait_blocked(others, "kept", "AlreadyManaged")
    teams.apply(owners, bucket("kept"))  # restored from a backup without status
    teams.wait_ready(owners, "kept")
    assert cr_status(teams.cluster, owners, "kept")["uid"] == uid, "the same incarnation"
    # The Event is posted in the background once the status write has landed.
    wait_until(
        lambda: any(
            e["reason"] == "Rebound"
            for e in teams.cluster.kubectl_json("get", "events", namespace=owners)["items"]
        ),
        "the re-bind is said in an Event",
    )
    assert teams.binding("kept")["spec"]["phase"] == "Bound"
    assert teams.blocked(others, "kept")["reason"] == "AlreadyManaged"
    assert teams.mutations() == [("create", "kept")], "nothing created again, nothing deleted"


#: A platform admin other than the operator's user (the test's kubeconfig is both otherwise).
AS_ADMIN = ("--as=platform-admin", "--as-group=system:masters")


def test_an_admins_delete_of_a_bound_binding_is_refused_and_hands_nothing_over(
    teams: Teams,
) -> None:
    owners, others = teams.namespaces
    teams.owner_ready("guarded")
    bound = teams.binding("guarded")
    name = bound["metadata"]["name"]
    assert bound["metadata"]["finalizers"] == ["takoform.io/binding-protection"]
    assert bound["metadata"]["annotations"]["takoform.io/guardian"], "the operator's user"
    teams.apply(others, bucket("guarded", importId=canonical_import_id(SPACE, "guarded", REF)))
    teams.wait_blocked(others, "guarded", "AlreadyManaged")

    refused = teams.cluster.kubectl("delete", "takoformbinding", name, *AS_ADMIN, check=False)
    assert refused.returncode != 0, refused.stdout
    assert f"is Bound to {owners}/guarded" in refused.stderr, refused.stderr
    assert "--force" in refused.stderr, "the override is named"
    handover = json.dumps({"spec": {"claimRef": {"namespace": others, "name": "guarded"}}})
    changed = teams.cluster.kubectl("patch", "takoformbinding", name, "--type=merge",
                                    "-p", handover, *AS_ADMIN, check=False)  # fmt: skip
    assert changed.returncode != 0 and "only the operator changes" in changed.stderr
    unprotect = json.dumps({"metadata": {"finalizers": None}})
    stripped = teams.cluster.kubectl("patch", "takoformbinding", name, "--type=merge",
                                     "-p", unprotect, *AS_ADMIN, check=False)  # fmt: skip
    assert stripped.returncode != 0, "the protection cannot be taken off either"

    # The binding, the owner and the waiting import are as they were; nothing was sent for it.
    after = teams.binding("guarded")
    assert after["metadata"]["resourceVersion"] == bound["metadata"]["resourceVersion"]
    assert teams.blocked(others, "guarded")["reason"] == "AlreadyManaged"
    assert is_ready(teams.cluster, owners, "guarded")
    assert teams.mutations() == [("create", "guarded")]

    # The owner's own deletion lets it go: the operator lifts the protection, then deletes it
    # (the waiting import goes first, or it would bind the name again to find nothing).
    teams.cluster.kubectl("delete", "bucket", "guarded", "--timeout=60s", namespace=others)
    teams.cluster.kubectl("delete", "bucket", "guarded", "--timeout=60s", namespace=owners)
    assert binding_of(teams.cluster, "Bucket", "guarded") is None
    assert sorted(teams.mutations()) == [("create", "guarded"), ("delete", "guarded")]


def test_an_owner_that_vanished_while_no_operator_ran_is_rebound_by_its_own_manifest(
    teams: Teams,
) -> None:
    owners, others = teams.namespaces
    uid = teams.owner_ready("kept")
    teams.stop()
    # With no operator running, no operator ever sees its DELETED event.
    teams.vanish(owners, "kept")
    wait_until(lambda: teams.cluster.get_object("bucket", "kept", owners) is None, "CR gone")
    teams.start(one_process=True)
    teams.apply(others, bucket("kept", importId=canonical_import_id(SPACE, "kept", REF)))
    teams.wait_blocked(others, "kept", "AlreadyManaged")
    teams.apply(owners, bucket("kept"))  # the same manifest, applied again
    teams.wait_ready(owners, "kept")
    assert cr_status(teams.cluster, owners, "kept")["uid"] == uid, "the same incarnation"
    claim = teams.binding("kept")["spec"]["claimRef"]
    assert (claim["namespace"], claim["name"]) == (owners, "kept")
    assert teams.blocked(others, "kept")["reason"] == "AlreadyManaged"
    assert teams.mutations() == [("create", "kept")], "nothing created again, nothing deleted"


def test_a_missing_binding_is_rebuilt_by_its_owner_never_taken_by_a_waiting_import(
    teams: Teams,
) -> None:
    owners, others = teams.namespaces
    uid = teams.owner_ready("rebuilt")
    teams.apply(others, bucket("rebuilt", importId=canonical_import_id(SPACE, "rebuilt", REF)))
    teams.wait_blocked(others, "rebuilt", "AlreadyManaged")
    # The owner is paused, so it cannot write its binding again at once; then the binding goes
    # the way an admin's forced release (or a reinstalled binding CRD) takes it.
    teams.cluster.kubectl("annotate", "bucket", "rebuilt", "takoform.io/paused=true",
                          namespace=owners)  # fmt: skip
    name = teams.binding("rebuilt")["metadata"]["name"]
    for patch in (FORCED, UNPROTECTED):
        teams.cluster.kubectl("patch", "takoformbinding", name, "--type=merge",
                              "-p", json.dumps(patch), *AS_ADMIN)  # fmt: skip
    teams.cluster.kubectl("delete", "takoformbinding", name, *AS_ADMIN)

    # The waiting import is woken and waits on: the owner's status records the resource.
    wait_until(
        lambda: "another CR records it" in teams.blocked(others, "rebuilt").get("message", ""),
        "the import waits for the CR that records the resource",
    )
    assert binding_of(teams.cluster, "Bucket", "rebuilt") is None, "the import bound nothing"
    teams.cluster.kubectl("annotate", "bucket", "rebuilt", "takoform.io/paused-",
                          namespace=owners)  # fmt: skip
    wait_until(
        lambda: (binding_of(teams.cluster, "Bucket", "rebuilt") or {})
        .get("spec", {}).get("claimRef", {}).get("namespace") == owners,
        "the owner binds it again",
    )  # fmt: skip
    teams.wait_ready(owners, "rebuilt")
    assert cr_status(teams.cluster, owners, "rebuilt")["uid"] == uid
    assert teams.wait_blocked(others, "rebuilt", "AlreadyManaged")
    assert not cr_status(teams.cluster, others, "rebuilt").get("uid"), "never bound"
    assert teams.mutations() == [("create", "rebuilt")], "the importer changed nothing"


def test_an_owner_that_vanished_while_no_operator_ran_is_found_lost_at_start(
    teams: Teams,
) -> None:
    owners, _ = teams.namespaces
    uid = teams.owner_ready("vanished")
    teams.stop()
    teams.vanish(owners, "vanished")
    wait_until(lambda: teams.cluster.get_object("bucket", "vanished", owners) is None, "CR gone")
    teams.start(one_process=True)
    # Nobody names the identity again: the operator finds the owner gone by itself.
    wait_until(lambda: teams.binding("vanished")["spec"]["phase"] == "Lost", "the binding Lost")
    lost = teams.binding("vanished")["spec"]
    assert (lost["lastOwner"]["namespace"], lost["lastOwner"]["name"]) == (owners, "vanished")
    assert lost.get("uid") in (None, uid)
    assert "finalizers" not in teams.binding("vanished")["metadata"], "Lost is not protected"
    assert teams.mutations() == [("create", "vanished")]
