"""Each hash replica watches only its share (kube.shards, docs/scaling.md), on the real API
server: every CR gets its slot label in the write that puts the finalizer on (no write more),
each replica's watch delivers its own share and nothing of the others', a killed replica's
share is taken over, and a slot label edited by hand is put right. The events of a new CR
that another replica owns never reach kopf in the others (kube.shards.passes_over). The
TakoformBindings are shared out with their owners' CRs, and a CR contending for another
replica's binding is still woken when it is released."""

from __future__ import annotations

import json
import re
import signal
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from fixtures_kube import KubeCluster, wait_until
from manifests import bucket
from operator_process import (
    Operator,
    condition_of,
    cr_status,
    is_ready,
    operator_process,
    serving,
)
from processes import free_port
from tenancy import binding_of, granted

from takoform_operator.core.binding import NAMESPACE_LABEL
from takoform_operator.core.import_id import canonical_import_id
from takoform_operator.core.shard_ring import (
    SLOT_LABEL,
    SLOTS,
    owner,
    shard_key,
    slot_key,
    slot_of,
    view_of,
)
from takoform_operator.registry_data import load_registry
from takoform_spec.identity import FormLine

pytestmark = [pytest.mark.kube, pytest.mark.host, pytest.mark.usefixtures("kube_crds")]

CRS = [f"cr-{i:02d}" for i in range(60)]
#: Created once the replicas share CRS out, and deleted again.
LATE = [f"late-{i:02d}" for i in range(12)]
LEASE_SECONDS = 12.0  # generous: the test machine is shared and often loaded
WRITES = ("POST", "PUT", "PATCH", "DELETE", "APPLY")


def _metric(operator: Operator, name: str) -> float:
    found = re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", operator.metrics(), re.M)
    return sum(float(value) for value in found)


def _buckets(cluster: KubeCluster) -> Counter[str]:
    """From the API server's own metrics: the writes to Buckets it answered, by verb and
    subresource ("PATCH", "PATCH status"...), the watch events it sent of them ("events", to
    every watcher of Buckets: the replicas, and the garbage collector once it has discovered
    the kind), and the watches of Buckets open now ("watches")."""
    found: Counter[str] = Counter()
    for line in cluster.kubectl("get", "--raw", "/metrics").stdout.splitlines():
        name, _, rest = line.partition("{")
        labels = dict(re.findall(r'(\w+)="([^"]*)"', rest.split("}")[0]))
        if labels.get("resource") != "buckets":
            continue
        count = int(float(line.rsplit(" ", 1)[1]))
        if name == "apiserver_watch_events_total":
            found["events"] += count
        elif name == "apiserver_longrunning_requests" and labels.get("verb") == "WATCH":
            found["watches"] += count
        elif name == "apiserver_request_total" and labels.get("verb") in WRITES:
            found[f"{labels['verb']} {labels.get('subresource', '')}".strip()] += count
    return found


def _replica(
    stack: ExitStack,
    cluster: KubeCluster,
    host: Any,
    namespace: str,
    log: Path,
    **settings: str,
) -> Operator:
    """A hash replica on `namespace` (its ring's Leases there too), serving its metrics."""
    port = free_port()
    process = stack.enter_context(operator_process(
        cluster.kubeconfig, host, namespace, log,
        METRICS_PORT=str(port), BIND_ADDRESS="127.0.0.1", SHARDING="hash",
        LEASE_NAMESPACE=namespace, LEASE_SECONDS=str(LEASE_SECONDS),
        LEASE_RENEW_DEADLINE_SECONDS="8", LEASE_RETRY_SECONDS="1", **settings,
    ))  # fmt: skip
    replica = Operator(process, log, f"http://127.0.0.1:{port}/metrics")
    wait_until(lambda: serving(replica), f"{log.stem}'s metrics", timeout=30)
    return replica


def test_each_replica_watches_and_keeps_only_its_share(
    kube_cluster: KubeCluster, kube_namespace: str, host_factory: Any, tmp_path: Path
) -> None:
    host = host_factory(commit_delay=0.05)
    with host.api() as api:
        api.put("/v1alpha3/spaces/team-a").raise_for_status()
    slot = {name: str(slot_of(shard_key(kube_namespace, name))) for name in CRS}
    kube_cluster.apply(
        json.dumps({"apiVersion": "v1", "kind": "List",
                    "items": [json.loads(bucket(name)) for name in CRS]}),
        namespace=kube_namespace,
    )  # fmt: skip
    before = _buckets(kube_cluster)
    replicas: dict[str, Operator] = {}

    def edit_all(size: int, generation: int) -> None:
        for name in CRS:
            kube_cluster.apply(bucket(name, size=size), namespace=kube_namespace)
        for name in CRS:
            wait_until(
                lambda n=name: (kube_cluster.get_object("bucket", n, kube_namespace)
                                or {}).get("status", {}).get("observedGeneration") == generation
                and is_ready(kube_cluster, kube_namespace, n),
                f"Bucket {name} reconciled at generation {generation}", timeout=120,
            )  # fmt: skip

    def labels() -> dict[str, str | None]:
        items = kube_cluster.list_objects("bucket", kube_namespace)
        return {i["metadata"]["name"]: (i["metadata"].get("labels") or {}).get(SLOT_LABEL)
                for i in items}  # fmt: skip

    def shared(live: list[str]) -> bool:
        """Every live replica sees them all, none an unclaimed CR, their shares add up to
        every CR, and each watches exactly what it serves: no CR in two watches."""
        found = {
            name: {
                metric: _metric(replicas[name], f"takoform_shard_{metric}")
                for metric in ("members", "unclaimed_crs", "serving_crs", "watched_crs")
            }
            for name in live
        }
        return (
            all(f["members"] == len(live) and f["unclaimed_crs"] == 0 for f in found.values())
            and sum(f["serving_crs"] for f in found.values()) == len(CRS)
            and all(f["watched_crs"] == f["serving_crs"] for f in found.values())
        )

    def bindings_shared(live: list[str]) -> bool:
        """The bindings of this test's CRs carry their owner's slot label, and each live
        replica keeps, of them, only those of its own CRs: beyond its share it keeps at most
        the cluster's other bindings (not Bound, or written by other tests' operators)."""
        items = kube_cluster.list_objects("takoformbinding")
        labels = [i["metadata"].get("labels") or {} for i in items]
        ours = [
            i
            for i, x in zip(items, labels, strict=True)
            if x.get(NAMESPACE_LABEL) == kube_namespace
        ]
        labelled = all(
            (i["metadata"].get("labels") or {}).get(SLOT_LABEL)
            == str(slot_of(shard_key(kube_namespace, i["spec"]["claimRef"]["name"])))
            for i in ours
            if i["spec"]["phase"] == "Bound"
        )
        kept = {n: _metric(replicas[n], "takoform_bindings_known") for n in live}
        served = {n: _metric(replicas[n], "takoform_shard_serving_crs") for n in live}
        print("bindings kept per replica:", kept, "of", len(items))
        return labelled and all(
            served[n] <= kept[n] <= served[n] + len(items) - len(ours) for n in live
        )

    with ExitStack() as stack:
        stack.enter_context(granted(kube_cluster, kube_namespace, ["team-a"]))
        try:
            for name in ("slot-a", "slot-b", "slot-c"):
                log = tmp_path / f"{name}.log"
                replicas[name] = _replica(stack, kube_cluster, host, kube_namespace, log,
                                          POD_NAME=name, LEASE_NAME="slots",
                                          POLL_READY_SECONDS="30")  # fmt: skip
            for name in CRS:
                wait_until(lambda n=name: is_ready(kube_cluster, kube_namespace, n),
                           f"Bucket {name} Ready", timeout=180)  # fmt: skip
            wait_until(lambda: shared(list(replicas)), "three replicas, each watching its share",
                       timeout=60)  # fmt: skip
            wait_until(lambda: bindings_shared(list(replicas)), "each replica's bindings",
                       timeout=60)  # fmt: skip
            # The label came with the finalizer: one write to each CR itself, as without it.
            assert labels() == slot
            assert (_buckets(kube_cluster) - before)["PATCH"] == len(CRS)
            shares = {n: _metric(o, "takoform_shard_watched_crs") for n, o in replicas.items()}
            print("watched per replica:", shares)
            assert all(0 < share < len(CRS) for share in shares.values()), shares

            # A new CR reaches every watch until its owner labels it, then leaves the others':
            # they pass both events over (counted at exit, below), and it still becomes Ready.
            kube_cluster.apply(
                json.dumps({"apiVersion": "v1", "kind": "List",
                            "items": [json.loads(bucket(name)) for name in LATE]}),
                namespace=kube_namespace,
            )  # fmt: skip
            for name in LATE:
                wait_until(lambda n=name: is_ready(kube_cluster, kube_namespace, n),
                           f"Bucket {name} Ready", timeout=120)  # fmt: skip
            kube_cluster.kubectl("delete", "bucket", *LATE, "--wait=true",
                                 namespace=kube_namespace)  # fmt: skip
            wait_until(lambda: shared(list(replicas)), "the late CRs gone from every share",
                       timeout=60)  # fmt: skip
            # Each change of a CR reaches its owner's watch alone, and every other watcher of
            # Buckets (the garbage collector's, once it has discovered the kind; one that starts
            # meanwhile is sent every Bucket first): every replica watching every CR would add
            # two events per write. The API server counts the BOOKMARKs it sends too: each
            # watch gets one about every minute (the cacher's bookmark frequency, ±1 s).
            before, began = _buckets(kube_cluster), time.monotonic()
            edit_all(15, 2)
            after, elapsed = _buckets(kube_cluster), time.monotonic() - began
            sent = after - before
            writes = sum(sent[key] for key in sent if key not in ("events", "watches"))
            others = after["watches"] - len(replicas)
            bookmarks = after["watches"] * (1 + int(elapsed // 58))
            print(f"{sent['events']} watch events of Buckets for {writes} writes in "
                  f"{elapsed:.0f} s, {others} other watchers: {dict(sent)}")  # fmt: skip
            assert writes >= 2 * len(CRS)
            assert sent["events"] <= (
                (1 + others) * writes + sent["watches"] * len(CRS) + bookmarks
            )

            # A killed replica's share is taken over: watched by the survivors, Ready again.
            victim = max(shares, key=lambda n: shares[n])
            replicas[victim].process.send_signal(signal.SIGKILL)
            replicas[victim].process.wait(timeout=10)
            survivors = [n for n in replicas if n != victim]
            wait_until(lambda: shared(survivors), "two replicas sharing every CR",
                       timeout=LEASE_SECONDS + 60)  # fmt: skip
            wait_until(lambda: bindings_shared(survivors), "the survivors' bindings",
                       timeout=60)  # fmt: skip
            edit_all(20, 3)

            # A label edited by hand is put right: one naming another slot (its owner may not
            # watch that slot), one naming no slot at all (every replica sees it).
            wrong = {CRS[0]: str((int(slot[CRS[0]]) + 1) % SLOTS), CRS[1]: "anything"}
            for name, value in wrong.items():
                kube_cluster.kubectl("label", "bucket", name, f"{SLOT_LABEL}={value}",
                                     "--overwrite", namespace=kube_namespace)  # fmt: skip
            wait_until(lambda: labels() == slot, "the slot labels put right", timeout=60)
            wait_until(lambda: shared(survivors), "each survivor watching its share again",
                       timeout=60)  # fmt: skip
        except BaseException:
            for name, operator in replicas.items():
                print(f"--- {name}:\n{operator.log_tail(40)}")
            raise
    written = Counter(
        line.split("slot label of ", 1)[1].split(" ", 1)[0]
        for operator in replicas.values()
        for line in operator.log.read_text(errors="replace").splitlines()
        if "slot label of " in line and " set to " in line
    )
    # Each edit put right once or, when both survivors saw it at the moment, twice: never more.
    assert set(written) == {f"{kube_namespace}/{name}" for name in wrong}, written
    assert all(count <= 2 for count in written.values()), written
    passed = {
        name: int(re.findall(r"CRs passed over: (\d+)", operator.log.read_text())[-1])
        for name, operator in replicas.items()
        if name in survivors
    }
    print("watch events passed over:", passed)
    assert all(count >= 2 for count in passed.values()), passed


def test_a_contender_in_another_replicas_share_is_woken_by_the_release(
    kube_cluster: KubeCluster, kube_namespace: str, host_factory: Any, tmp_path: Path
) -> None:
    """Two hash replicas; a Bucket owned in one's share, and an import of the same resource
    from the same namespace in the other's, Blocked AlreadyManaged: no watch of its replica
    delivers the binding, Bound to the other's CR. The owner lets go (Orphan, then deleted):
    the Released binding carries no slot label, so the import's replica is sent it, wakes the
    import, and the import takes the resource, long before its ready poll (600 s) would have
    looked again."""
    host = host_factory(commit_delay=0.05)
    with host.api() as api:
        api.put("/v1alpha3/spaces/team-a").raise_for_status()
    members = ["share-a", "share-b"]
    view = view_of(members)

    def owner_of(name: str) -> str | None:
        return owner(slot_key(slot_of(shard_key(kube_namespace, name))), view)

    holder = "held"
    contender = next(
        f"importer-{i}" for i in range(1000) if owner_of(f"importer-{i}") != owner_of(holder)
    )
    ref = load_registry().default_create_ref(FormLine("storage.takoform.io/v1", "Bucket"))
    assert ref is not None
    replicas: dict[str, Operator] = {}
    with ExitStack() as stack:
        stack.enter_context(granted(kube_cluster, kube_namespace, ["team-a"]))
        try:
            for name in members:
                log = tmp_path / f"{name}.log"
                replicas[name] = _replica(stack, kube_cluster, host, kube_namespace, log,
                                          POD_NAME=name, LEASE_NAME="contend",
                                          POLL_READY_SECONDS="600")  # fmt: skip
            wait_until(
                lambda: all(_metric(o, "takoform_shard_members") == 2 for o in replicas.values()),
                "two replicas in the ring", timeout=60,
            )  # fmt: skip
            kube_cluster.apply(bucket(holder), namespace=kube_namespace)
            wait_until(lambda: is_ready(kube_cluster, kube_namespace, holder),
                       f"Bucket {holder} Ready", timeout=120)  # fmt: skip
            import_id = canonical_import_id("team-a", holder, ref)
            kube_cluster.apply(bucket(contender, resourceName=holder, importId=import_id),
                               namespace=kube_namespace)  # fmt: skip

            def blocked() -> str | None:
                found = condition_of(cr_status(kube_cluster, kube_namespace, contender), "Blocked")
                return found.get("reason") if found.get("status") == "True" else None

            wait_until(lambda: blocked() == "AlreadyManaged", f"{contender} AlreadyManaged",
                       timeout=60)  # fmt: skip
            patch = json.dumps({"spec": {"deletionPolicy": "Orphan"}})
            kube_cluster.kubectl("patch", "bucket", holder, "--type=merge", "-p", patch,
                                 namespace=kube_namespace)  # fmt: skip
            kube_cluster.kubectl("delete", "bucket", holder, "--timeout=60s",
                                 namespace=kube_namespace)  # fmt: skip
            wait_until(lambda: is_ready(kube_cluster, kube_namespace, contender),
                       f"{contender} Ready: woken by the release", timeout=120)  # fmt: skip
            taken = binding_of(kube_cluster, "Bucket", holder)
            assert taken is not None
            assert taken["spec"]["claimRef"]["name"] == contender
            assert taken["metadata"]["labels"][SLOT_LABEL] == str(
                slot_of(shard_key(kube_namespace, contender))
            )
        except BaseException:
            for name, operator in replicas.items():
                print(f"--- {name}:\n{operator.log_tail(40)}")
            raise
