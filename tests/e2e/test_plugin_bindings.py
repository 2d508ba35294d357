"""`kubectl takoform bindings` and `release` against the real API server, its TakoformBinding CRD
and RBAC. The operator's binding logic is not needed: the bindings are created here as the
operator writes them (core.binding's to_json), and each test reads back what the API server
keeps. Release writes are conditioned on the resourceVersion read; a write in between is
reported, never overwritten."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures_kube import KubeCluster

from takoform_operator.core.binding import (
    Binding,
    ClaimRef,
    Identity,
    Phase,
    binding_from_json,
)
from takoform_operator.core.state import Requested
from takoform_operator.plugin import cli
from takoform_operator.plugin.cluster import Cluster
from takoform_spec.identity import FormLine, FormRef

pytestmark = [pytest.mark.kube]

PLUGIN = Path(sys.executable).with_name("kubectl-takoform")
BUCKET = FormLine("storage.takoform.io/v1", "Bucket")
REF = FormRef(BUCKET.api_version, BUCKET.kind, "1.1.0", "sha256:" + "ab" * 32)


def plugin(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PLUGIN), *args],
        capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip


class Bindings:
    """TakoformBindings created for one test (in its own space), deleted afterwards."""

    def __init__(self, cluster: KubeCluster, space: str) -> None:
        self.cluster, self.space, self.names = cluster, space, []
        env = {k: v for k, v in os.environ.items() if not k.startswith("TAKOFORM_")}
        self.env = {**env, "KUBECONFIG": str(cluster.kubeconfig)}

    def create(
        self,
        resource: str,
        phase: Phase,
        claim: ClaimRef | None = None,
        last_owner: ClaimRef | None = None,
        *,
        space: str | None = None,
        guardian: str | None = None,
    ) -> Binding:
        binding = Binding(
            Identity(space or self.space, BUCKET, resource, "prod"),
            phase,
            claim,
            REF,
            Requested(space or self.space, resource, None, None, "prod"),
            f"host-uid-{resource}",
            last_owner,
        )
        # create, not apply: apply would drop the nulls of spec.requested.
        document = binding.to_json(guardian=guardian)
        self.cluster.kubectl("create", "-f", "-", input=json.dumps(document))
        self.names.append(binding.name)
        return binding

    def get(self, name: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.cluster.get_object("takoformbinding", name)
        return found


@pytest.fixture
def bindings(
    kube_cluster: KubeCluster, kube_crds: list[Any], kube_namespace: str
) -> Iterator[Bindings]:
    made = Bindings(kube_cluster, kube_namespace)
    yield made
    if made.names:
        kube_cluster.kubectl(
            "delete", "takoformbinding", *made.names, "--ignore-not-found", "--wait=false"
        )


def _one_line_error(answer: subprocess.CompletedProcess[str], status: int, words: str) -> None:
    assert answer.returncode == status, answer.stderr
    assert answer.stdout == ""
    assert len(answer.stderr.strip().splitlines()) == 1, answer.stderr
    assert words in answer.stderr and "Traceback" not in answer.stderr, answer.stderr


def _rows(stdout: str) -> dict[str, str]:
    """NAME -> the rest of its row, single-spaced."""
    header, *lines = stdout.splitlines()
    assert " ".join(header.split()) == "NAME PHASE HOST SPACE KIND RESOURCE OWNER LAST OWNER"
    return {line.split()[0]: " ".join(line.split()[1:]) for line in lines}


def test_bindings_lists_phases_owners_reservations_and_escapes_what_it_prints(
    bindings: Bindings, kube_cluster: KubeCluster, kube_tools: Any
) -> None:
    ns = bindings.space
    bound = bindings.create("logs", Phase.BOUND, ClaimRef(ns, "logs", str(uuid.uuid4())))
    reserved = bindings.create("data", Phase.BOUND, ClaimRef(ns, "data"))
    released = bindings.create("old", Phase.RELEASED, None, ClaimRef(ns, "old", "u-1"))
    lost = bindings.create("gone", Phase.LOST, ClaimRef("team-b", "next"), ClaimRef(ns, "gone"))
    # A bidirectional override in a space (the CRD refuses C0/C1 controls there, not this).
    tricky = bindings.create("tricky", Phase.BOUND, None, space=f"{ns}\u202eevil")

    listed = plugin("bindings", env=bindings.env)
    assert listed.returncode == 0, listed.stderr
    rows = _rows(listed.stdout)
    assert rows[bound.name] == f"Bound prod {ns} Bucket logs {ns}/logs -"
    assert rows[reserved.name] == f"Bound prod {ns} Bucket data {ns}/data (reserved) -"
    assert rows[released.name] == f"Released prod {ns} Bucket old <none> {ns}/old"
    assert rows[lost.name] == f"Lost prod {ns} Bucket gone team-b/next (reserved) {ns}/gone"
    assert rows[tricky.name] == f"Bound prod {ns}\\u202eevil Bucket tricky <none> -"
    assert "\u202e" not in listed.stdout, "the terminal gets the escape as text"
    # -A is accepted (cluster-scoped: the same list); and through kubectl itself.
    everywhere = plugin("bindings", "-A", env=bindings.env)
    assert everywhere.returncode == 0 and _rows(everywhere.stdout)[bound.name] == rows[bound.name]
    path_env = {
        **bindings.env,
        "PATH": f"{PLUGIN.parent}{os.pathsep}{bindings.env.get('PATH', '')}",
    }
    through = subprocess.run(
        [str(kube_tools.kubectl), "takoform", "bindings"],
        capture_output=True, text=True, env=path_env, timeout=60,
    )  # fmt: skip
    assert through.returncode == 0, through.stderr
    assert _rows(through.stdout)[lost.name] == rows[lost.name]


def test_release_to_reserves_it_for_one_cr_and_changes_nothing_else(bindings: Bindings) -> None:
    ns = bindings.space
    made = bindings.create("archive", Phase.RELEASED, None, ClaimRef(ns, "archive", "u-7"))
    before = bindings.get(made.name)
    assert before is not None
    answer = plugin("release", made.name, "--to", f"{ns}/archive-2", env=bindings.env)
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout == (
        f"TakoformBinding {made.name} reserved for {ns}/archive-2: only the Bucket 'archive-2' "
        f"in namespace '{ns}' may bind Bucket 'archive' in space '{ns}' on host 'prod' (phase "
        f"Released kept, last owner {ns}/archive).\n"
    )
    after = bindings.get(made.name)
    assert after is not None
    assert after["spec"] == {**before["spec"], "claimRef": {"namespace": ns, "name": "archive-2"}}
    assert after["metadata"]["labels"] == before["metadata"]["labels"]
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["metadata"]["resourceVersion"] != before["metadata"]["resourceVersion"]
    read = binding_from_json(after)
    assert (read.phase, read.claim, read.last_owner) == (
        Phase.RELEASED,
        ClaimRef(ns, "archive-2"),
        ClaimRef(ns, "archive", "u-7"),
    )
    assert (read.form_ref, read.requested, read.uid) == (made.form_ref, made.requested, made.uid)

    # A reservation (no uid), even while Bound, may be moved to another CR the same way.
    pre = bindings.create("pre", Phase.BOUND, ClaimRef(ns, "pre"))
    moved = plugin(
        "release",
        f"takoformbinding.operator.takoform.io/{pre.name}",
        "--to",
        f"{ns}/other",
        env=bindings.env,
    )
    assert moved.returncode == 0, moved.stderr
    again = bindings.get(pre.name)
    assert again is not None and again["spec"]["claimRef"] == {"namespace": ns, "name": "other"}
    assert again["spec"]["phase"] == "Bound"


def test_release_to_another_namespace_is_a_hand_off_confirmed_with_yes(
    bindings: Bindings, kube_cluster: KubeCluster
) -> None:
    """Reserving a binding for a CR of another namespace than its last owner's hands a host
    resource across namespaces: without a terminal to ask on, nothing is written unless --yes
    says the admin means it."""
    ns = bindings.space
    made = bindings.create("shared", Phase.RELEASED, None, ClaimRef(ns, "shared", "u-5"))
    before = bindings.get(made.name)
    asked = plugin("release", made.name, "--to", "team-z/taker", env=bindings.env)
    _one_line_error(
        asked, 2,
        f"error: {made.name} is of namespace '{ns}' (last owner {ns}/shared); reserving it for "
        "team-z/taker hands Bucket 'shared'",
    )  # fmt: skip
    assert "--yes" in asked.stderr
    assert bindings.get(made.name) == before, "not a single write"

    confirmed = plugin("release", made.name, "--to", "team-z/taker", "--yes", env=bindings.env)
    assert confirmed.returncode == 0, confirmed.stderr
    after = bindings.get(made.name)
    assert after is not None
    assert after["spec"]["claimRef"] == {"namespace": "team-z", "name": "taker"}

    # Made by hand, it is no namespace's: any reservation is a hand-off.
    hand_made = bindings.create("nobodys", Phase.BOUND, None)
    _one_line_error(
        plugin("release", hand_made.name, "--to", f"{ns}/x", env=bindings.env), 2,
        "is of no namespace (made by hand)",
    )  # fmt: skip


def _on_a_terminal(args: list[str], answer: str, env: dict[str, str]) -> tuple[int, str]:
    """Run the plugin with a terminal as its stdin and stderr, type `answer` when it asks;
    its exit status and what the terminal showed."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [str(PLUGIN), *args], stdin=follower, stdout=subprocess.PIPE, stderr=follower, env=env
    )
    os.close(follower)
    shown = b""
    while b"[y/N]" not in shown:
        ready, _, _ = select.select([leader], [], [], 60)
        assert ready, f"no question asked: {shown!r}"
        shown += os.read(leader, 4096)
    os.write(leader, answer.encode() + b"\n")
    status = process.wait(timeout=60)
    with contextlib.suppress(OSError):  # the terminal closes with the process
        while select.select([leader], [], [], 0.5)[0]:
            shown += os.read(leader, 4096)
    os.close(leader)
    return status, shown.decode("utf-8", "replace")


def test_on_a_terminal_the_hand_off_is_asked_and_done_only_on_yes(bindings: Bindings) -> None:
    ns = bindings.space
    made = bindings.create("asked", Phase.RELEASED, None, ClaimRef(ns, "asked", "u-6"))
    before = bindings.get(made.name)
    args = ["release", made.name, "--to", "team-z/taker"]
    status, shown = _on_a_terminal(args, "n", bindings.env)
    assert status == 1 and "reserving it for team-z/taker hands" in shown, shown
    assert "not confirmed: nothing was written" in shown
    assert bindings.get(made.name) == before
    status, shown = _on_a_terminal(args, "y", bindings.env)
    assert status == 0, shown
    after = bindings.get(made.name)
    assert after is not None
    assert after["spec"]["claimRef"] == {"namespace": "team-z", "name": "taker"}


def test_a_namespace_created_again_under_the_same_name_is_another_namespace(
    bindings: Bindings, kube_cluster: KubeCluster
) -> None:
    """The binding recorded the uid of its last owner's namespace: a namespace of that name
    with another uid (deleted and created again, another tenant's perhaps) inherits nothing
    without the admin's confirmation; the same namespace needs none."""
    ns = bindings.space
    namespace = kube_cluster.get_object("namespace", ns)
    assert namespace is not None
    same = ClaimRef(ns, "old", "u-1", namespace["metadata"]["uid"])
    kept = bindings.create("kept", Phase.LOST, None, same)
    answer = plugin("release", kept.name, "--to", f"{ns}/new", env=bindings.env)
    assert answer.returncode == 0, answer.stderr

    other = bindings.create("other", Phase.LOST, None, ClaimRef(ns, "old", "u-1", "gone-uid"))
    asked = plugin("release", other.name, "--to", f"{ns}/new", env=bindings.env)
    _one_line_error(asked, 2, f"reserving it for {ns}/new hands Bucket 'other'")
    assert "deleted and created again" in asked.stderr


def test_release_without_to_deletes_it_and_says_the_resource_is_unbound(bindings: Bindings) -> None:
    ns = bindings.space
    made = bindings.create("cache", Phase.LOST, None, ClaimRef(ns, "cache", "u-9"))
    answer = plugin("release", made.name, env=bindings.env)
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout == (
        f"TakoformBinding {made.name} deleted (it was Lost, last owner {ns}/cache): Bucket "
        f"'cache' in space '{ns}' on host 'prod' is unbound; any namespace granted space "
        f"'{ns}' on host 'prod' may import it.\n"
    )
    assert bindings.get(made.name) is None
    _one_line_error(
        plugin("release", made.name, env=bindings.env), 1, f"no TakoformBinding named '{made.name}'"
    )


def test_release_refuses_a_binding_bound_to_a_cr_and_changes_nothing(bindings: Bindings) -> None:
    ns = bindings.space
    uid = str(uuid.uuid4())
    made = bindings.create("owned", Phase.BOUND, ClaimRef(ns, "owned", uid))
    before = bindings.get(made.name)
    for extra in ([], ["--to", f"{ns}/thief"]):
        answer = plugin("release", made.name, *extra, env=bindings.env)
        _one_line_error(
            answer, 1,
            f"error: {made.name} is bound to {ns}/owned; delete that CR with deletionPolicy "
            "Orphan first: kubectl patch ",
        )  # fmt: skip
        assert f"kubectl delete buckets.storage.takoform.io/owned -n {ns}" in answer.stderr
    assert bindings.get(made.name) == before, "not a single write"


#: The operator's user in an installed chart: not the test's (the admission policy's guardian).
OPERATOR_USER = "system:serviceaccount:takoform-system:takoform-operator"


@pytest.mark.parametrize("to", [None, "rescue/owned"], ids=["delete", "reserve"])
def test_force_overrides_the_protection_of_a_bound_binding_and_says_what_it_risked(
    bindings: Bindings, to: str | None
) -> None:
    ns = bindings.space
    made = bindings.create(
        "owned", Phase.BOUND, ClaimRef(ns, "owned", "u-1"), guardian=OPERATOR_USER
    )
    refused = bindings.cluster.kubectl("delete", "takoformbinding", made.name, check=False)
    assert refused.returncode != 0 and f"is Bound to {ns}/owned" in refused.stderr
    extra = ["--to", to] if to else []
    plain = plugin("release", made.name, *extra, env=bindings.env)
    _one_line_error(plain, 1, "(or override it: --force)")

    forced = plugin("release", made.name, *extra, "--force", "--yes", env=bindings.env)
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout.splitlines()[-1] == (
        f"Forced: {ns}/owned was Bound to it and still acts on Bucket 'owned' in space '{ns}' "
        "on host 'prod'; it binds it again at its next look unless another CR binds it first."
    )
    after = bindings.get(made.name)
    if to is None:
        assert after is None
        return
    assert after is not None
    assert after["spec"]["claimRef"] == {"namespace": "rescue", "name": "owned"}
    assert not after["metadata"].get("finalizers"), "a pre-binding is not protected"
    assert "takoform.io/force-release" in after["metadata"]["annotations"]


def test_wrong_command_lines_are_refused_before_anything_is_read(bindings: Bindings) -> None:
    cases = [
        (["release", "tb-x", "--to", "no-slash"], "--to wants NAMESPACE/NAME"),
        (["release", "tb-x", "--to", "Team_A/logs"], "--to wants NAMESPACE/NAME"),
        (["release", "Not A Name"], "is not a TakoformBinding name"),
    ]
    for args, words in cases:
        _one_line_error(plugin(*args, env=bindings.env), 2, words)


@pytest.mark.parametrize("to", [None, "reserved/for"], ids=["delete", "reserve"])
def test_a_binding_changed_meanwhile_is_reported_and_not_overwritten(
    bindings: Bindings,
    kube_cluster: KubeCluster,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    to: str | None,
) -> None:
    """Between the plugin's read and its write, someone else writes the binding (here: a
    kubectl patch, as the operator binding it would): the API server refuses the write
    conditioned on the stale resourceVersion, and the command says so."""
    ns = bindings.space
    made = bindings.create("raced", Phase.RELEASED, None, ClaimRef(ns, "raced", "u-3"))
    read = Cluster.get_binding

    def read_then_someone_writes(self: Cluster, name: str) -> dict[str, Any] | None:
        stale = read(self, name)
        bound = {"phase": "Bound", "claimRef": {"namespace": ns, "name": "raced", "uid": "u-4"}}
        kube_cluster.kubectl(
            "patch", "takoformbinding", name, "--type=merge", "-p", json.dumps({"spec": bound})
        )
        return stale

    monkeypatch.setattr(Cluster, "get_binding", read_then_someone_writes)
    argv = ["release", made.name, "--kubeconfig", str(kube_cluster.kubeconfig)]
    assert cli.main([*argv, *(["--to", to, "--yes"] if to else [])]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"error: {made.name} changed meanwhile, nothing was written: run it again\n"
    after = bindings.get(made.name)
    assert after is not None, "not deleted"
    assert after["spec"]["claimRef"] == {"namespace": ns, "name": "raced", "uid": "u-4"}
    assert after["spec"]["phase"] == "Bound"


def test_listing_and_releasing_take_an_admins_rights(
    bindings: Bindings, kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    """Namespace users have no rights on TakoformBindings (the chart's editor and viewer roles
    name none): the API server refuses, the plugin says so in one line, nothing changes."""
    made = bindings.create("mine", Phase.RELEASED, None, ClaimRef(kube_namespace, "mine"))
    before = bindings.get(made.name)
    kube_cluster.kubectl("create", "serviceaccount", "user", namespace=kube_namespace)
    kube_cluster.kubectl(
        "create", "rolebinding", "user-edit", "--clusterrole=edit",
        f"--serviceaccount={kube_namespace}:user", namespace=kube_namespace,
    )  # fmt: skip
    token = kube_cluster.kubectl("create", "token", "user", namespace=kube_namespace).stdout
    env = {**bindings.env, "KUBECONFIG": str(kube_cluster.token_kubeconfig(token.strip()))}
    _one_line_error(plugin("bindings", env=env), 1, "list takoformbindings: forbidden")
    for extra in ([], ["--to", f"{kube_namespace}/other"]):
        answer = plugin("release", made.name, *extra, env=env)
        _one_line_error(answer, 1, f"get takoformbindings {made.name}: forbidden")
    assert bindings.get(made.name) == before
