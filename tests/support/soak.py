#!/usr/bin/env python3
"""Chaos soak: the operator process SIGKILLed at random moments while the host misbehaves.

Against a real kube-apiserver + etcd (tests/support/localcluster.py), the reference host and the
`takoform-operator run` process, CRs of several Form lines are created, updated and deleted
(both deletion policies) while:

- the operator is SIGKILLed at random moments and restarted;
- the host injects faults: 5xx rate, latency, dropped connections, slow commits, operations
  stuck then released, failed operations, record expiry (all at once and by a short retention),
  a few out-of-band recreates (new uid: the CR must become Blocked UidMismatch) and out-of-band
  deletes (the operator must create the resource again);
- kube-apiserver and etcd are SIGKILLed and restarted.

When the chaos stops, the faults are cleared, the operator runs undisturbed until every CR has
converged, and an independent checker reads the host's SQLite database (read-only) and the CRs
from the API server — never the operator's logs — and asserts the invariants of docs/soak.md.

Every random choice comes from one `random.Random(seed)`: a failing seed replays the same
sequence of actions (the timing of the processes is the machine's).

    .venv/bin/python hack/soak.py                 # the long run: >= 200 kills
    .venv/bin/python hack/soak.py --ci            # the CI variant: >= 20 kills, ~3 minutes
    .venv/bin/python hack/soak.py --seed 1234     # replay a seed
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import sqlite3
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

import localcluster

REPO = Path(__file__).resolve().parents[2]
SPACE = "soak"
NAMESPACE = "soak"
TOKEN = "soak-token"
ADMIN_TOKEN = "soak-admin"

#: Form lines of the soak: kind, plural, apiVersion, create parameters, the field an update
#: changes and the values it draws from.
LINES = [
    ("Bucket", "buckets", "storage.takoform.io/v1",
     {"region": "eu-west-1", "sizeGiB": 10}, "sizeGiB", [10, 20, 30, 40, 50]),
    ("Queue", "queues", "messaging.takoform.io/v1",
     {"region": "eu-west-1"}, "visibilityTimeoutSeconds", [30, 60, 90, 120]),
    ("Zone", "zones", "dns.takoform.io/v1",
     {"domain": "soak.example.org"}, "ttl", [300, 600, 3600, 7200]),
]  # fmt: skip
PLURAL = {kind: plural for kind, plural, *_ in LINES}
#: The soak's namespace may use its space on the implicit host `default` (docs/tenancy.md).
GRANT = {
    "apiVersion": "operator.takoform.io/v1alpha1",
    "kind": "TakoformSpaceGrant",
    "metadata": {"name": "soak"},
    "spec": {"hostRef": "default", "spaces": [SPACE], "namespaces": {"names": [NAMESPACE]}},
}
CALM_FAULTS = {
    "latencyMs": 0,
    "errorRate": 0.0,
    "dropRate": 0.0,
    "stuckOperations": False,
    "failNextOperations": 0,
    "commitDelayMs": 50,
    "operationRetentionSeconds": 3600.0,
}


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} soak: {message}", flush=True)


def wait_for(what: str, condition: Callable[[], bool], timeout: float, every: float = 0.25) -> None:
    """Poll `condition` until it holds; raise after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


# -- the processes -----------------------------------------------------------------------------


class Kube:
    """The API server through httpx with the admin client certificate."""

    def __init__(self, kubeconfig: Path) -> None:
        config = yaml.safe_load(kubeconfig.read_text())
        user = config["users"][0]["user"]
        cluster = config["clusters"][0]["cluster"]
        context = ssl.create_default_context(cafile=cluster["certificate-authority"])
        context.load_cert_chain(user["client-certificate"], user["client-key"])
        self.kubeconfig = kubeconfig
        self.client = httpx.Client(base_url=cluster["server"], verify=context, timeout=10)

    @staticmethod
    def path(kind: str, name: str = "") -> str:
        api_version = next(v for k, _, v, *_ in LINES if k == kind)
        tail = f"/{name}" if name else ""
        return f"/apis/{api_version}/namespaces/{NAMESPACE}/{PLURAL[kind]}{tail}"

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One call, retried while the API server is unreachable or restarting (30 s)."""
        deadline = time.monotonic() + 30
        while True:
            try:
                answer = self.client.request(method, path, **kwargs)
                if answer.status_code < 500 or time.monotonic() > deadline:
                    return answer
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.3)

    def list_all(self) -> dict[str, dict[str, Any]]:
        """Every soak CR by 'Kind/name' (one list per line)."""
        found = {}
        for kind, *_ in LINES:
            answer = self.request("GET", self.path(kind))
            answer.raise_for_status()
            for item in answer.json()["items"]:
                found[f"{kind}/{item['metadata']['name']}"] = item
        return found


class Host:
    def __init__(self, workdir: Path) -> None:
        self.port = localcluster.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.db = workdir / "host.sqlite"
        self.log = workdir / "host.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "takoform_host.cli", "serve", "--db", str(self.db),
             "--listen", f"127.0.0.1:{self.port}", "--commit-delay", "0.05",
             "--space", SPACE, "--log-level", "warning"],
            env={**os.environ, "TAKOFORM_HOST_TOKENS": TOKEN,
                 "TAKOFORM_HOST_ADMIN_TOKEN": ADMIN_TOKEN},
            stdout=self.log.open("ab"), stderr=subprocess.STDOUT,
        )  # fmt: skip

        def healthy() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(self.url + "/healthz", timeout=1).status_code == 200
            return False

        wait_for("the host", healthy, 30, every=0.05)

    def admin(self, method: str, path: str, body: Any = None) -> httpx.Response:
        return httpx.request(
            method, self.url + "/admin/v1" + path, json=body, timeout=15,
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        )  # fmt: skip

    def faults(self, **faults: Any) -> None:
        self.admin("PUT", "/faults", faults).raise_for_status()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=15)


class Operator:
    """The operator: one process, replicas electing a leader with a Lease, or replicas that are
    active shards (TAKOFORM_SHARDING=hash, a Lease each); SIGKILLed (the leader when they elect
    one, any replica when they are shards) and started again, one log per replica for all its
    lives."""

    LEASE = "takoform-soak"

    def __init__(
        self,
        kube: Kube,
        host: Host,
        workdir: Path,
        poll: float,
        replicas: int = 1,
        sharded: bool = False,
    ) -> None:
        self.kube = kube
        self.env = {
            **os.environ,
            "KUBECONFIG": str(kube.kubeconfig),
            "TAKOFORM_HOST_URL": host.url,
            "TAKOFORM_HOST_TOKEN": TOKEN,
            "TAKOFORM_HOST_INSECURE": "true",  # the local reference host is plain http
            "TAKOFORM_METRICS_PORT": "0",
            "TAKOFORM_HEALTH_PORT": "0",
            "TAKOFORM_POLL_READY_SECONDS": str(poll),
            # Convergence is judged from the CRs: a change made on the host out of band (a
            # delete, a recreate) must show in them within a couple of polls, not within the
            # default idle ceiling (600 s). One doubling still runs the idle poll under chaos.
            "TAKOFORM_POLL_IDLE_MAX_SECONDS": str(2 * poll),
            # Likewise after each kill: the first looks of Ready CRs are spread over one poll,
            # not the default 30 s, which back-to-back kills would keep pushing out.
            "TAKOFORM_START_SPREAD_SECONDS": str(poll),
            "TAKOFORM_HOST_TIMEOUT_SECONDS": "5",
        }
        self.sharded = sharded
        if sharded:
            # Timings with room for a loaded machine: a replica that misses its renew deadline
            # stops (exit 1) and is started again like a killed one.
            self.env |= {
                "TAKOFORM_SHARDING": "hash",
                "TAKOFORM_LEASE_NAME": self.LEASE,
                "TAKOFORM_LEASE_NAMESPACE": NAMESPACE,
                "TAKOFORM_LEASE_SECONDS": "8",
                "TAKOFORM_LEASE_RENEW_DEADLINE_SECONDS": "6",
                "TAKOFORM_LEASE_RETRY_SECONDS": "1",
            }
        elif replicas > 1:
            self.env |= {
                "TAKOFORM_LEADER_ELECTION": "true",
                "TAKOFORM_LEASE_NAME": self.LEASE,
                "TAKOFORM_LEASE_NAMESPACE": NAMESPACE,
                "TAKOFORM_LEASE_SECONDS": "4",
                "TAKOFORM_LEASE_RENEW_DEADLINE_SECONDS": "3",
                "TAKOFORM_LEASE_RETRY_SECONDS": "0.5",
            }
        self.logs = [workdir / f"operator-{i}.log" for i in range(replicas)]
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * replicas
        self.kills = 0
        self.leader_kills = 0
        self.started_at = 0.0

    def start(self) -> None:
        """Start every replica that is not running."""
        for i, proc in enumerate(self.procs):
            if self._alive(proc):
                continue
            self.started_at = time.monotonic()
            with self.logs[i].open("ab") as sink:
                command = [sys.executable, "-m", "takoform_operator.cli", "run"]
                self.procs[i] = subprocess.Popen(
                    [*command, "--namespace", NAMESPACE],
                    env={**self.env, "TAKOFORM_POD_NAME": f"soak-replica-{i}"},
                    stdout=sink, stderr=subprocess.STDOUT,
                )  # fmt: skip

    @property
    def running(self) -> bool:
        """Every replica runs."""
        return all(self._alive(proc) for proc in self.procs)

    @property
    def any_running(self) -> bool:
        return any(self._alive(proc) for proc in self.procs)

    @staticmethod
    def _alive(proc: subprocess.Popen[bytes] | None) -> bool:
        return proc is not None and proc.poll() is None

    def leader(self) -> int | None:
        """The replica holding the Lease, if one does (none when they are shards)."""
        if len(self.procs) == 1:
            return 0
        if self.sharded:
            return None
        path = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{self.LEASE}"
        answer = self.kube.request("GET", path)
        holder = (answer.json().get("spec") or {}).get("holderIdentity") or ""
        if answer.status_code != 200 or not holder.startswith("soak-replica-"):
            return None
        return int(holder.removeprefix("soak-replica-"))

    def kill(self) -> None:
        """SIGKILL the leader (with replicas; any one while none leads, or when they are shards):
        it releases nothing."""
        victim = self.leader()
        if victim is not None:
            self.leader_kills += len(self.procs) > 1
        else:
            victim = random.randrange(len(self.procs))
        proc = self.procs[victim]
        if proc is not None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=15)
            self.kills += 1
            self.procs[victim] = None

    def stop(self) -> None:
        for proc in self.procs:
            if proc is not None and self._alive(proc):
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


# -- what the soak did, and what the observer saw ----------------------------------------------


@dataclass
class Cr:
    key: str  # Kind/name
    kind: str
    name: str
    policy: str
    parameters: dict[str, Any]
    uid: str = ""
    deleted: bool = False  # deletion requested
    recreated: list[str] = field(default_factory=list)  # injected out-of-band recreates: old uids
    oob_deleted: list[str] = field(default_factory=list)  # injected out-of-band deletes: old uids


@dataclass
class Journal:
    """What the soak injected (the checker's ground truth) and what the observer recorded."""

    crs: dict[str, Cr] = field(default_factory=dict)
    faults: Counter[str] = field(default_factory=Counter)
    # Observed from the API server: per CR key, the identity fields ever recorded and every
    # uid ever seen with Ready=True (in order).
    targets: dict[str, set[str]] = field(default_factory=dict)
    ready_uids: dict[str, list[str]] = field(default_factory=dict)
    # Observed from the host's database: every operation record ever seen, by seq.
    operations: dict[int, dict[str, Any]] = field(default_factory=dict)
    # Every uid the host's database ever recorded as deleted (it keeps the last one per name).
    deleted_uids: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class HostDb:
    """A read-only look at the host's database."""

    resources: list[dict[str, Any]]
    operations: list[dict[str, Any]]
    highest: int  # the highest operation seq ever issued
    deleted_uids: set[str]  # uids the host records as deleted (the last one per name)


def read_db(db: Path) -> HostDb:
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    connection.row_factory = sqlite3.Row
    try:
        resources = [dict(r) for r in connection.execute("SELECT * FROM resources")]
        operations = [dict(r) for r in connection.execute("SELECT * FROM operations")]
        row = connection.execute(
            "SELECT seq FROM sqlite_sequence WHERE name = 'operations'"
        ).fetchone()
        deleted = {r["uid"] for r in connection.execute("SELECT uid FROM deleted_uids")}
    finally:
        connection.close()
    for resource in resources:
        resource["doc"] = json.loads(resource["doc"])
    return HostDb(resources, operations, int(row["seq"]) if row else 0, deleted)


def snapshot_operations(host: Host, journal: Journal) -> None:
    db = read_db(host.db)
    with journal.lock:
        for op in db.operations:
            journal.operations[op["seq"]] = op
        journal.deleted_uids |= db.deleted_uids


def observe_crs(kube: Kube, journal: Journal) -> None:
    items = kube.list_all()
    with journal.lock:
        for key, item in items.items():
            status = item.get("status") or {}
            if status.get("formRef") or status.get("name"):
                target = json.dumps(
                    [status.get("space"), status.get("formRef"), status.get("name")],
                    sort_keys=True,
                )
                journal.targets.setdefault(key, set()).add(target)
            if is_ready(item) and status.get("uid"):
                seen = journal.ready_uids.setdefault(key, [])
                if not seen or seen[-1] != status["uid"]:
                    seen.append(status["uid"])


class Observer(threading.Thread):
    """Snapshots the host's operation records (so a record that expires is still accounted
    for) and the CRs' recorded identities, every fraction of a second, until stopped."""

    def __init__(self, kube: Kube, host: Host, journal: Journal) -> None:
        super().__init__(daemon=True)
        self.kube, self.host, self.journal = kube, host, journal
        self.halt = threading.Event()
        self.errors = 0

    def run(self) -> None:
        turn = 0
        while not self.halt.wait(0.2):
            try:
                snapshot_operations(self.host, self.journal)
                if turn % 3 == 0:
                    observe_crs(self.kube, self.journal)
            except Exception:  # the API server may be restarting; the next turn looks again
                self.errors += 1
            turn += 1


def conditions(item: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (item.get("status") or {}).get("conditions") or []}


def is_ready(item: dict[str, Any]) -> bool:
    """Ready for the current generation, as `kubectl wait --for=condition=Ready` and kstatus
    read it: the condition's own observedGeneration and the status's both."""
    ready = conditions(item).get("Ready", {})
    status = item.get("status") or {}
    generation = item["metadata"].get("generation")
    return (
        ready.get("status") == "True"
        and ready.get("observedGeneration") == generation
        and status.get("observedGeneration") == generation
        and not status.get("pendingOperationId")
    )


def is_blocked_uid_mismatch(item: dict[str, Any]) -> bool:
    blocked = conditions(item).get("Blocked", {})
    return blocked.get("status") == "True" and blocked.get("reason") == "UidMismatch"


# -- the chaos ---------------------------------------------------------------------------------


@dataclass
class Plan:
    seed: int
    initial_crs: int
    kills: int  # the chaos phase ends after this many SIGKILLs of the operator
    pause: tuple[float, float]  # between two actions
    down: tuple[float, float]  # how long the operator stays dead after a kill
    apiserver_restarts: int
    etcd_restarts: int
    recreates: int
    oob_deletes: int
    converge_timeout: float
    lifetime: tuple[float, float] = (0.3, 6.0)  # a kill comes this long after the start
    poll: float = 3.0
    replicas: int = 1  # more than one: leader election, and each kill is the leader's
    sharded: bool = False  # the replicas are active shards; each kill is a random one's


def ci_plan(seed: int) -> Plan:
    return Plan(seed, initial_crs=18, kills=22, pause=(0.1, 0.9), down=(0.0, 1.5),
                apiserver_restarts=1, etcd_restarts=1, recreates=3, oob_deletes=2,
                converge_timeout=120)  # fmt: skip


def long_plan(seed: int) -> Plan:
    return Plan(seed, initial_crs=60, kills=220, pause=(0.1, 2.0), down=(0.0, 3.0),
                apiserver_restarts=4, etcd_restarts=4, recreates=8, oob_deletes=6,
                converge_timeout=300)  # fmt: skip


class Soak:
    def __init__(self, plan: Plan, workdir: Path, kube: Kube, host: Host, cluster: Any) -> None:
        self.plan = plan
        self.rng = random.Random(plan.seed)
        self.kube, self.host, self.cluster = kube, host, cluster
        self.journal = Journal()
        self.operator = Operator(kube, host, workdir, plan.poll, plan.replicas, plan.sharded)
        self.serial = 0
        self.stuck_until: float | None = None
        self.slow_until: float | None = None
        self.retention_until: float | None = None

    # CR actions
    def create(self) -> None:
        kind, _, api_version, parameters, _, _ = self.rng.choice(LINES)
        policy = self.rng.choice(["Delete", "Orphan"])
        self.serial += 1
        name = f"{kind.lower()}-{self.serial:04d}"
        body = {
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {"name": name},
            "spec": {"space": SPACE, "deletionPolicy": policy, "parameters": dict(parameters)},
        }
        answer = self.kube.request("POST", Kube.path(kind), json=body)
        answer.raise_for_status()
        cr = Cr(f"{kind}/{name}", kind, name, policy, dict(parameters))
        cr.uid = answer.json()["metadata"]["uid"]
        self.journal.crs[cr.key] = cr
        self.journal.faults["cr create"] += 1

    def live(self, untouchable: bool = False) -> list[Cr]:
        """CRs not being deleted (and, unless `untouchable`, not blocked by a recreate)."""
        return [
            cr
            for cr in self.journal.crs.values()
            if not cr.deleted and (untouchable or not cr.recreated)
        ]

    def update(self) -> None:
        crs = self.live()
        if not crs:
            return
        cr = self.rng.choice(crs)
        _, _, _, _, name, values = next(line for line in LINES if line[0] == cr.kind)
        value = self.rng.choice([v for v in values if v != cr.parameters.get(name)])
        cr.parameters[name] = value
        patch = {"spec": {"parameters": {name: value}}}
        answer = self.kube.request(
            "PATCH", Kube.path(cr.kind, cr.name), json=patch,
            headers={"Content-Type": "application/merge-patch+json"},
        )  # fmt: skip
        answer.raise_for_status()
        self.journal.faults["cr update"] += 1

    def delete(self) -> None:
        crs = self.live()
        if len(crs) < 4:
            return
        cr = self.rng.choice(crs)
        cr.deleted = True
        answer = self.kube.request("DELETE", Kube.path(cr.kind, cr.name))
        answer.raise_for_status()
        self.journal.faults[f"cr delete ({cr.policy})"] += 1

    # process actions
    def kill_operator(self) -> None:
        # A random moment of the process's life: during start-up, the first listing, or
        # reconciles (0.3-6 s after it was started).
        alive = time.monotonic() - self.operator.started_at
        time.sleep(max(0.0, self.rng.uniform(*self.plan.lifetime) - alive))
        if self.operator.any_running:
            self.operator.kill()
        time.sleep(self.rng.uniform(*self.plan.down))
        self.operator.start()

    def restart(self, component: str) -> None:
        log(f"restarting {component}")
        started = time.monotonic()
        self.cluster.restart(component, down_seconds=self.rng.uniform(0.5, 3.0))
        self.journal.faults[f"{component} restart"] += 1
        log(f"{component} back after {time.monotonic() - started:.1f} s")

    # host faults
    def flaky(self) -> None:
        faults = {
            "errorRate": self.rng.choice([0.0, 0.05, 0.1, 0.2, 0.3]),
            "latencyMs": self.rng.choice([0, 0, 50, 200, 500]),
            "dropRate": self.rng.choice([0.0, 0.02, 0.05, 0.1]),
        }
        self.host.faults(**faults)
        for name, value in faults.items():
            if value:
                self.journal.faults[name] += 1

    def calm(self) -> None:
        self.host.faults(errorRate=0.0, latencyMs=0, dropRate=0.0)

    def stuck(self) -> None:
        if self.stuck_until is None:
            self.host.faults(stuckOperations=True)
            self.stuck_until = time.monotonic() + self.rng.uniform(1.0, 6.0)
            self.journal.faults["stuckOperations"] += 1

    def slow(self) -> None:
        if self.slow_until is None:
            self.host.faults(commitDelayMs=self.rng.choice([1000, 2500, 5000]))
            self.slow_until = time.monotonic() + self.rng.uniform(2.0, 8.0)
            self.journal.faults["slow commits"] += 1

    def fail_next(self) -> None:
        self.host.faults(failNextOperations=self.rng.randint(1, 3))
        self.journal.faults["failNextOperations"] += 1

    def expire(self) -> None:
        if self.rng.random() < 0.5:
            snapshot_operations(self.host, self.journal)  # the checker still knows them
            self.host.admin("POST", "/operations/expire", {}).raise_for_status()
            self.journal.faults["expire all settled records"] += 1
        elif self.retention_until is None:
            self.host.faults(operationRetentionSeconds=self.rng.choice([1.0, 2.0]))
            self.retention_until = time.monotonic() + self.rng.uniform(3.0, 10.0)
            self.journal.faults["short retention"] += 1

    def release_due(self) -> None:
        now = time.monotonic()
        if self.stuck_until is not None and now >= self.stuck_until:
            self.host.faults(stuckOperations=False)
            self.stuck_until = None
        if self.slow_until is not None and now >= self.slow_until:
            self.host.faults(commitDelayMs=50)
            self.slow_until = None
        if self.retention_until is not None and now >= self.retention_until:
            self.host.faults(operationRetentionSeconds=3600.0)
            self.retention_until = None

    def out_of_band(self, action: str) -> None:
        """Recreate (new uid) or delete a Ready CR's host resource behind the operator's back."""
        candidates = [cr for cr in self.live() if not cr.oob_deleted]
        if not candidates:
            return
        cr = self.rng.choice(candidates)
        if not self.operator.running:
            self.operator.start()

        def ready() -> bool:
            self.release_due()  # a stuck or slow period must end while we wait
            return is_ready(self.kube.request("GET", Kube.path(cr.kind, cr.name)).json())

        try:
            wait_for(f"{cr.key} Ready before the out-of-band {action}", ready, timeout=60)
        except TimeoutError as exc:
            log(f"skipped: {exc}")
            return
        item = self.kube.request("GET", Kube.path(cr.kind, cr.name)).json()
        old_uid = item["status"]["uid"]
        api_version = item["apiVersion"]
        target = {"space": SPACE, "apiVersion": api_version, "kind": cr.kind, "name": cr.name}
        answer = self.host.admin("POST", f"/resources/{action}", target)
        answer.raise_for_status()
        if action == "recreate":
            cr.recreated.append(old_uid)
        else:
            cr.oob_deleted.append(old_uid)
        self.journal.faults[f"out-of-band {action}"] += 1
        log(f"out-of-band {action} of {cr.key} (uid {old_uid})")

    # the run
    def chaos(self) -> None:
        plan = self.plan
        for _ in range(plan.initial_crs):
            self.create()
        self.operator.start()
        # When the kube restarts and the out-of-band actions happen, as fractions of the kills.
        schedule: list[tuple[float, str]] = sorted(
            [(self.rng.uniform(0.1, 0.9), "restart kube-apiserver")
             for _ in range(plan.apiserver_restarts)]
            + [(self.rng.uniform(0.1, 0.9), "restart etcd") for _ in range(plan.etcd_restarts)]
            + [(self.rng.uniform(0.05, 0.7), "recreate") for _ in range(plan.recreates)]
            + [(self.rng.uniform(0.05, 0.7), "delete") for _ in range(plan.oob_deletes)]
        )  # fmt: skip
        actions: list[tuple[float, Callable[[], None]]] = [
            (0.30, self.kill_operator),
            (0.12, self.create),
            (0.22, self.update),
            (0.08, self.delete),
            (0.09, self.flaky),
            (0.07, self.calm),
            (0.05, self.stuck),
            (0.05, self.slow),
            (0.04, self.fail_next),
            (0.04, self.expire),
        ]
        weights = [w for w, _ in actions]
        while self.operator.kills < plan.kills:
            time.sleep(self.rng.uniform(*plan.pause))
            self.release_due()
            progress = self.operator.kills / plan.kills
            while schedule and schedule[0][0] <= progress:
                _, what = schedule.pop(0)
                if what.startswith("restart "):
                    self.restart(what.split(" ", 1)[1])
                else:
                    self.out_of_band(what)
            (chosen,) = self.rng.choices([a for _, a in actions], weights)
            kills = self.operator.kills
            chosen()
            if self.operator.kills != kills and self.operator.kills % 10 == 0:
                log(f"{self.operator.kills} of {plan.kills} kills, {len(self.journal.crs)} CRs")
        for _, what in schedule:  # whatever the kills outran still happens
            if what.startswith("restart "):
                self.restart(what.split(" ", 1)[1])
            else:
                self.out_of_band(what)
        self.journal.faults["operator SIGKILL"] = self.operator.kills
        if plan.replicas > 1 and not plan.sharded:
            self.journal.faults["operator SIGKILL of the Lease holder"] = self.operator.leader_kills

    def settle(self) -> float:
        """Faults off, the operator up; wait until every CR converged. Returns the seconds."""
        self.host.faults(**CALM_FAULTS)
        self.stuck_until = self.slow_until = self.retention_until = None
        if not self.operator.running:
            self.operator.start()
        started = time.monotonic()
        wait_for("every CR to converge", self.converged, self.plan.converge_timeout, every=1.0)
        return time.monotonic() - started

    def converged(self) -> bool:
        try:
            items = self.kube.list_all()
        except (httpx.HTTPError, OSError):
            return False
        for key, cr in self.journal.crs.items():
            item = items.get(key)
            if cr.deleted:
                if item is not None:
                    return False
            elif item is None:
                return False
            elif cr.recreated:
                if not is_blocked_uid_mismatch(item):
                    return False
            elif not is_ready(item):
                return False
            elif (item.get("status") or {}).get("uid") in cr.oob_deleted:
                # Ready as it was before its resource was deleted behind the operator's back:
                # the look that finds it gone (after a start, within the start spread) is to come.
                return False
        return True


# -- the checker -------------------------------------------------------------------------------


@dataclass
class Verdict:
    lines: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def check(self, name: str, problems: list[str], detail: str = "") -> None:
        mark = "ok  " if not problems else "FAIL"
        self.lines.append(f"  [{mark}] {name}{': ' + detail if detail else ''}")
        for problem in problems[:20]:
            self.lines.append(f"         - {problem}")
        if len(problems) > 20:
            self.lines.append(f"         - ... and {len(problems) - 20} more")
        if problems:
            self.failures.append(name)


def check(journal: Journal, kube: Kube, host: Host) -> Verdict:
    """The invariants, from the host's database and the CRs only (docs/soak.md)."""
    verdict = Verdict()
    items = kube.list_all()
    db = read_db(host.db)
    resources, operations, highest = db.resources, db.operations, db.highest
    with journal.lock:
        for op in operations:
            journal.operations[op["seq"]] = op
        journal.deleted_uids |= db.deleted_uids
        seen_ops = dict(journal.operations)
        host_deleted = set(journal.deleted_uids)
    mine = [r for r in resources if r["space"] == SPACE]
    by_cr_uid = {cr.uid: cr for cr in journal.crs.values()}
    by_target = {(r["kind"], r["name"]): r for r in mine}

    def creator(resource: dict[str, Any]) -> str:
        key = resource["doc"]["metadata"].get("creationIdempotencyKey") or ""
        return key.split(":create:")[0] if ":create:" in key else ""

    # 1. No duplicate: one host resource per CR (by the CR uid its creation key starts with),
    # and each under the CR's own name.
    per_cr = Counter(creator(r) for r in mine if creator(r))
    duplicates = [f"CR uid {uid} created {n} host resources" for uid, n in per_cr.items() if n > 1]
    strays = [
        f"{r['kind']}/{r['name']} carries the creation key of {by_cr_uid[creator(r)].key}"
        for r in mine
        if creator(r) in by_cr_uid
        and (r["kind"], r["name"]) != tuple(by_cr_uid[creator(r)].key.split("/"))
    ]
    unknown_keys = [
        f"{r['kind']}/{r['name']} creation key {creator(r)!r} names no CR of this soak"
        for r in mine
        if creator(r) and creator(r) not in by_cr_uid
    ]
    verdict.check(
        "no duplicate host resource for any CR",
        duplicates + strays + unknown_keys,
        f"{len(mine)} host resources, {len(per_cr)} carrying a CR's creation key",
    )

    # 2. No host resource without its CR, except deliberate Orphans.
    orphans_ok, leaks = 0, []
    for r in mine:
        key = f"{r['kind']}/{r['name']}"
        cr = journal.crs.get(key)
        item = items.get(key)
        if cr is None:
            leaks.append(f"{key} (uid {r['uid']}): no CR of that name was ever made")
        elif item is not None and not cr.deleted:
            continue  # checked by 3 and 4
        elif cr.policy == "Orphan":
            orphans_ok += 1
        else:
            leaks.append(f"{key} (uid {r['uid']}): its CR was deleted with deletionPolicy Delete")
    verdict.check(
        "no host resource without its CR except deliberate Orphans",
        leaks,
        f"{orphans_ok} deliberate orphans",
    )

    # 3. Identity: the recorded target never changed; a Ready uid changed only where an
    # out-of-band recreate or delete was injected (and then by at most that many).
    changed = []
    for key, targets in journal.targets.items():
        if len(targets) > 1:
            changed.append(f"{key}: recorded target changed: {sorted(targets)}")
    for key, uids in journal.ready_uids.items():
        cr = journal.crs[key]
        allowed = len(cr.oob_deleted)  # the operator creates a deleted resource again
        if len(uids) - 1 > allowed:
            changed.append(f"{key}: Ready under uids {uids}; injected deletes: {cr.oob_deleted}")
    for key, cr in journal.crs.items():
        item = items.get(key)
        if item is None or cr.deleted:
            continue
        status = item.get("status") or {}
        if cr.recreated and status.get("uid") != cr.recreated[0]:
            # Blocked must keep the binding: expected uid is the one before the recreate.
            changed.append(f"{key}: bound uid {status.get('uid')}, expected {cr.recreated[0]}")
    verdict.check(
        "no CR whose bound uid, FormRef or name changed without an explicit remedy",
        changed,
        f"{sum(len(t) for t in journal.targets.values())} targets recorded, "
        f"{sum(len(c.recreated) + len(c.oob_deleted) for c in journal.crs.values())} injected",
    )

    # 4. Convergence: Ready (with the host holding the CR's spec), Blocked UidMismatch exactly
    # where a recreate was injected, gone when deleted.
    unconverged, ready, blocked, gone = [], 0, 0, 0
    for key, cr in journal.crs.items():
        item = items.get(key)
        if cr.deleted:
            if item is None:
                gone += 1
            else:
                unconverged.append(f"{key}: deleted but still there")
            continue
        if item is None:
            unconverged.append(f"{key}: missing")
            continue
        status = item.get("status") or {}
        if cr.recreated:
            if is_blocked_uid_mismatch(item):
                blocked += 1
            else:
                unconverged.append(f"{key}: not Blocked UidMismatch after a recreate")
            continue
        if (
            is_blocked_uid_mismatch(item)
            or conditions(item).get("Blocked", {}).get("status") == "True"
        ):
            unconverged.append(f"{key}: Blocked {conditions(item)['Blocked'].get('reason')}")
            continue
        if not is_ready(item):
            unconverged.append(f"{key}: not Ready: {sorted(conditions(item))}")
            continue
        resource = by_target.get((cr.kind, cr.name))
        if resource is None or resource["uid"] != status.get("uid"):
            unconverged.append(
                f"{key}: Ready but the host has no resource with uid {status.get('uid')}"
            )
            continue
        spec = resource["doc"].get("spec") or {}
        differ = {k: (v, spec.get(k)) for k, v in cr.parameters.items() if spec.get(k) != v}
        if differ:
            unconverged.append(f"{key}: Ready but the host spec differs (want, have): {differ}")
            continue
        ready += 1
    verdict.check(
        "every CR converges",
        unconverged,
        f"{ready} Ready, {blocked} Blocked UidMismatch (recreates), {gone} deleted and gone",
    )

    # 5. Operations: nothing running; every succeeded create is accounted for by a CR's state, a
    # delete, a deliberate orphan or an injected out-of-band action; no CR has a pending marker.
    unsettled = []
    present = {r["uid"] for r in mine}
    bound = {(items[k].get("status") or {}).get("uid") for k in items}
    # A delete whose record expired between two snapshots is still a deletion: the host's
    # deleted_uids table is the evidence.
    deleted_uids = host_deleted | {
        op["resource_uid"] for op in seen_ops.values()
        if op["verb"] == "delete" and op["state"] == "succeeded"
    }  # fmt: skip
    injected = {u for cr in journal.crs.values() for u in cr.recreated + cr.oob_deleted}
    orphan_uids = {cr.uid for cr in journal.crs.values() if cr.policy == "Orphan" and cr.deleted}
    still = {op["seq"] for op in operations}
    settled_unobserved = 0
    for seq, op in sorted(seen_ops.items()):
        where = f"op {op['id']} ({op['verb']} {op['kind']}/{op['name']}, {op['state']})"
        if op["state"] == "running":
            if seq in still:
                unsettled.append(f"{where} still running")
            else:
                # The host expires only settled records: last seen running, then gone, means it
                # settled between two snapshots with an outcome nobody saw.
                settled_unobserved += 1
            continue
        if op["verb"] != "create" or op["state"] != "succeeded":
            continue
        uid = op["resource_uid"]
        owner = (op["idempotency_key"] or "").split(":create:")[0]
        if uid in bound or uid in deleted_uids or uid in injected:
            continue
        if uid in present and owner in orphan_uids:
            continue
        unsettled.append(f"{where}: resource uid {uid} is in no CR's state, not deleted, "
                         f"not a deliberate orphan")  # fmt: skip
    for key, item in items.items():
        if (item.get("status") or {}).get("pendingOperationId"):
            unsettled.append(f"{key}: still has pendingOperationId")
    unobserved = highest - len(seen_ops)
    verdict.check(
        "every operation the host accepted is settled in some CR's state or still recorded",
        unsettled,
        f"{highest} accepted, {len(still)} still recorded, {len(seen_ops) - len(still)} "
        f"expired after being observed ({settled_unobserved} of them last seen running: settled "
        f"unobserved), {unobserved} expired unobserved (not judged)",
    )
    return verdict


# -- main --------------------------------------------------------------------------------------


def run(plan: Plan, workdir: Path) -> int:
    log(f"seed {plan.seed} (replay: hack/soak.py --seed {plan.seed}"
        f"{' --ci' if plan.kills < 100 else ''}); work directory {workdir}")  # fmt: skip
    cluster = localcluster.LocalCluster(workdir / "cluster", die_with_parent=True)
    cluster.start()
    host: Host | None = None
    soak: Soak | None = None
    observer: Observer | None = None
    started = time.monotonic()
    try:
        kube = Kube(cluster.kubeconfig)
        kubectl = [str(cluster.tools.kubectl), f"--kubeconfig={cluster.kubeconfig}"]
        subprocess.run([*kubectl, "apply", "--server-side", "-f", str(REPO / "crds")],
                       check=True, capture_output=True)  # fmt: skip
        subprocess.run([*kubectl, "wait", "--for=condition=Established", "--timeout=60s",
                        "crd", "--all"], check=True, capture_output=True)  # fmt: skip
        subprocess.run([*kubectl, "create", "namespace", NAMESPACE],
                       check=True, capture_output=True)  # fmt: skip
        subprocess.run([*kubectl, "apply", "-f", "-"], input=json.dumps(GRANT).encode(),
                       check=True, capture_output=True)  # fmt: skip
        host = Host(workdir)
        soak = Soak(plan, workdir, kube, host, cluster)
        observer = Observer(Kube(cluster.kubeconfig), host, soak.journal)
        observer.start()
        chaos_started = time.monotonic()
        soak.chaos()
        chaos_seconds = time.monotonic() - chaos_started
        log(f"chaos over after {chaos_seconds:.0f} s; faults off, waiting for convergence")
        try:
            converge_seconds = soak.settle()
        except TimeoutError as exc:
            log(str(exc))
            converge_seconds = float("nan")
        observer.halt.set()
        observer.join()
        observe_crs(kube, soak.journal)
        verdict = check(soak.journal, kube, host)
        journal = soak.journal
        print()
        print(f"soak seed {plan.seed}: {soak.operator.kills} operator kills, "
              f"{len(journal.crs)} CRs ({sum(c.deleted for c in journal.crs.values())} deleted), "
              f"chaos {chaos_seconds:.0f} s, convergence {converge_seconds:.1f} s, "
              f"total {time.monotonic() - started:.0f} s")  # fmt: skip
        print("injected: " + ", ".join(f"{k} {v}" for k, v in sorted(journal.faults.items())))
        print("invariants:")
        print("\n".join(verdict.lines))
        if verdict.failures:
            print(f"\nFAILED: {len(verdict.failures)} invariant(s); replay with --seed {plan.seed}"
                  f"; logs in {workdir}")  # fmt: skip
            return 1
        print(f"\nall invariants hold (seed {plan.seed})")
        return 0
    finally:
        if observer is not None:
            observer.halt.set()
        if soak is not None:
            soak.operator.stop()
        if host is not None:
            host.stop()
        cluster.stop(remove=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, help="default: a random one (printed)")
    parser.add_argument("--ci", action="store_true", help="the short variant (>= 20 kills)")
    parser.add_argument("--kills", type=int, help="override the number of operator kills")
    parser.add_argument("--crs", type=int, help="override the number of initial CRs")
    parser.add_argument("--workdir", type=Path, help="default: a fresh temporary directory")
    parser.add_argument(
        "--replicas", type=int, default=1,
        help="operator replicas electing a leader (a Lease); each kill is the leader's",
    )  # fmt: skip
    parser.add_argument(
        "--sharded", action="store_true",
        help="the replicas are active shards (TAKOFORM_SHARDING=hash); each kill is a random one's",
    )  # fmt: skip
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    plan = ci_plan(seed) if args.ci else long_plan(seed)
    if args.kills is not None:
        plan.kills = args.kills
    if args.crs is not None:
        plan.initial_crs = args.crs
    plan.replicas = args.replicas
    plan.sharded = args.sharded
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="takoform-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    return run(plan, workdir)


if __name__ == "__main__":
    sys.exit(main())
