#!/usr/bin/env python3
"""Benchmark the whole stack: the operator process, a real kube-apiserver, the reference host.

For each size N and mode it prints one row:

- backlog: N CRs applied while the operator is not running, then the operator starts;
- bloated: the same, each CR carrying about 100 KB of foreign labels and annotations (BLOAT);
- stream: the operator runs and N CRs are applied at a fixed rate;
- tenants: N CRs of a busy namespace applied while the operator is not running, then the
  operator starts and, once the churn is under way, a quiet namespace's one CR is applied: its
  time to Ready with the fair scheduler and with FIFO slots (TAKOFORM_RECONCILE_SCHEDULING),
  side by side, with the busy namespace's p50 (printed as a table of its own);
- throttled: the same two tenants against a host that answers 429 above `--host-rate`
  requests per second (its rateLimitPerSecond fault), with the per-namespace budget
  (TAKOFORM_HOST_REQUESTS_PER_SECOND at the host's rate) and without it, side by side: the
  quiet CR's time to Ready and its looks, the busy namespace's all-Ready time and the host's
  429s (in the tenants table);
- idle: N Ready CRs, a fresh operator; once every CR had its first look, the host's reads and the
  operator's CPU over `--window` seconds, with the idle poll off (TAKOFORM_POLL_IDLE_MAX_SECONDS
  at the ready poll: a fixed poll) and on (ten times the ready poll, as 600 s is to 60 s), side
  by side (a table of its own);
- restart: N Ready CRs, a fresh operator at the default ready poll: the time until every CR had
  its first look and the host's requests per second over the first minute, with
  TAKOFORM_START_SPREAD_SECONDS 0 and at its default, and with a host budget
  (TAKOFORM_HOST_REQUESTS_PER_SECOND at `--restart-rates`: the first looks paced at it), side by
  side (a table of its own);

with the time until all are Ready, CRs/s, p50/p99 time to Ready per CR, host requests per CR by
verb (from the host's access log), Kubernetes API writes per CR by verb (from the API server's
own `apiserver_request_total`, so kopf's and the client libraries' requests count too; the
benchmark's own creates are subtracted), the steady state over several poll intervals (API
writes, host mutations, host reads per CR), the operator's peak RSS, CPU seconds (in all, and
per CR until all were Ready) and event-loop lag; RSS per CR is the operator's RSS (peak,
and at the end of the steady polls) less an idle operator's (no CRs, measured once per run),
divided by N. Then, in the same run, a minimal asyncio
script brings N fresh CRs to the same end state (host resource created and settled, one status
write per CR) with the same concurrency, once for each mode measured: all CRs created before it
starts (backlog), or created at the stream's rate while it runs (stream). The overhead ratio is
the operator's time divided by the script's in the same mode. Each row also prints the whole
stack's CPU per CR (API server, etcd, host, and the operator or the script): on a machine the
stack saturates, that sum decides the wall time.

The operator and the script authenticate as the chart's ServiceAccount, with its RBAC and a
bound token, as the installed operator does (`--credentials certificate`: the admin's client
certificate instead).

    .venv/bin/python hack/bench_operator.py [--sizes 100,1000,5000]
        [--modes backlog,bloated,stream,tenants,throttled,idle,restart]

Figures are printed, never asserted: these machines are noisy. docs/performance.md has the
method and the figures measured.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import itertools
import json
import math
import os
import re
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from ssl import SSLContext
from typing import Any

import httpx
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests" / "support"))
from processes import free_port  # noqa: E402
from waiting import wait_until  # noqa: E402

import localcluster  # noqa: E402

SPACE = "bench"
TOKEN = "bench-token"
ADMIN_TOKEN = "bench-admin-token"
CONCURRENCY = 16
#: The restart and throttled rows' ready poll: the default (the restart's first minute then
#: holds first looks only; the throttled rows' host rate goes to the CRs not Ready yet).
RESTART_POLL = 60.0
#: One CR of each of several Form lines, cycled: kind, plural, parameters.
LINES = [
    ("Bucket", "buckets", "storage.takoform.io/v1", {"region": "eu-west-1", "sizeGiB": 10}),
    ("Queue", "queues", "messaging.takoform.io/v1", {"region": "eu-west-1"}),
    ("Zone", "zones", "dns.takoform.io/v1", {"domain": "bench.example.org"}),
]
PLURALS = {plural for _, plural, _, _ in LINES}
#: The one record per host resource that says who owns it (docs/tenancy.md, Bindings).
BINDING_PLURAL = "takoformbindings"
#: A bloated CR's foreign metadata: labels (key, 63-character value) and annotations (each of
#: BLOAT_NOTE characters), about 100 KB of JSON per CR, distinct per CR (nothing shared).
BLOAT_LABELS = 600
#: CRs per page of the benchmark's own lists.
LIST_PAGE = 100
BLOAT_ANNOTATIONS = 10
BLOAT_NOTE = 4000


# -- the pieces --------------------------------------------------------------------------------


@dataclass
class Kube:
    kubeconfig: Path
    kubectl: Path
    server: str
    ssl: ssl.SSLContext
    #: The cluster's CA only: with a client certificate, it would authenticate instead of a token.
    ca: SSLContext
    #: What the operator and the minimal script authenticate with: the admin's kubeconfig (its
    #: client certificate), or, after `run_as_service_account`, the chart's ServiceAccount.
    operator_kubeconfig: Path
    operator_token: str | None = None
    #: The control plane's processes by name (kube-apiserver, etcd, ...): their CPU is counted.
    pids: dict[str, int] = field(default_factory=dict)

    def run(self, *args: str, stdin: str | None = None) -> str:
        proc = subprocess.run(
            [str(self.kubectl), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            raise SystemExit(f"kubectl {' '.join(args)}: {proc.stderr}")
        return proc.stdout

    def client(self, *, as_operator: bool = False) -> httpx.AsyncClient:
        """The admin's client; `as_operator`: with the operator's credential instead."""
        token = self.operator_token if as_operator else None
        return httpx.AsyncClient(
            base_url=self.server,
            verify=self.ca if token else self.ssl,
            headers={"Authorization": f"Bearer {token}"} if token else None,
            limits=httpx.Limits(max_connections=CONCURRENCY * 2),
            timeout=60,
        )

    def request_counts(self) -> Counter[tuple[str, str, str]]:
        """(verb, resource, subresource) -> count, from the API server's own metric."""
        text = self.run("get", "--raw", "/metrics")
        counts: Counter[tuple[str, str, str]] = Counter()
        for line in text.splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
            value = float(line.rsplit(" ", 1)[1])
            key = (
                labels.get("verb", ""),
                labels.get("resource", ""),
                labels.get("subresource", ""),
            )
            counts[key] += int(value)
        return counts


def kube_from(cluster: Any) -> Kube:
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    user = config["users"][0]["user"]
    cluster_doc = config["clusters"][0]["cluster"]
    context = ssl.create_default_context(cafile=cluster_doc["certificate-authority"])
    context.load_cert_chain(user["client-certificate"], user["client-key"])
    ca = ssl.create_default_context(cafile=cluster_doc["certificate-authority"])
    return Kube(
        cluster.kubeconfig, cluster.tools.kubectl, cluster_doc["server"], context, ca,
        operator_kubeconfig=cluster.kubeconfig, pids=cluster.pids,
    )  # fmt: skip


def cpu_seconds_of(pid: int) -> float:
    """A process's user and system CPU so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stack_cpu(kube: Kube, host: Host) -> Counter[str]:
    """CPU seconds so far of what serves both the operator and the minimal script: the API
    server, etcd and the reference host. On a saturated machine their work per CR, not only the
    client's, decides the wall time (docs/performance.md, "The 1,000 row")."""
    return Counter(
        {
            "API server": cpu_seconds_of(kube.pids["kube-apiserver"]),
            "etcd": cpu_seconds_of(kube.pids["etcd"]),
            "host": cpu_seconds_of(host.proc.pid),
        }
    )


#: The chart's release the benchmark renders RBAC from, and its ServiceAccount's namespace.
RELEASE, RELEASE_NAMESPACE = "bench", "takoform-bench"
OPERATOR_ACCOUNT = f"{RELEASE}-takoform-operator"


def run_as_service_account(kube: Kube, helm: Path, workdir: Path) -> None:
    """Make the operator (and the minimal script) authenticate as a cluster runs them: as the
    chart's ServiceAccount, with the chart's RBAC, by a bound token. The API server verifies a
    client certificate on every request and a token once, then caches it; with the admin's
    certificate the benchmark would charge the API server a verification per write that the
    installed operator never costs it."""
    rendered = subprocess.run(
        [str(helm), "template", RELEASE, str(REPO / "charts" / "takoform-operator"),
         "--namespace", RELEASE_NAMESPACE,
         "--show-only", "templates/serviceaccount.yaml", "--show-only", "templates/rbac.yaml",
         "--show-only", "templates/rbac-tenancy.yaml"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    kube.run("create", "namespace", RELEASE_NAMESPACE)
    kube.run("apply", "--server-side", "-f", "-", stdin=rendered)
    token = kube.run(
        "create", "token", OPERATOR_ACCOUNT, "--namespace", RELEASE_NAMESPACE, "--duration=48h"
    ).strip()
    config = yaml.safe_load(kube.kubeconfig.read_text())
    config["users"][0]["user"] = {"token": token}
    path = workdir / "operator.kubeconfig"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    kube.operator_kubeconfig, kube.operator_token = path, token


class Host:
    """The reference host with an access log, counting requests by verb and kind of path."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "host.log"
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "takoform_host.cli", "serve",
                "--db", str(workdir / "host.sqlite"),
                "--listen", f"127.0.0.1:{self.port}",
                "--commit-delay", "0.05", "--access-log", "--log-level", "info",
                "--space", SPACE,
            ],
            env={
                **os.environ, "TAKOFORM_HOST_TOKENS": TOKEN,
                "TAKOFORM_HOST_ADMIN_TOKEN": ADMIN_TOKEN,
            },
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait_until(self._healthy, "the reference host", timeout=30)

    def _healthy(self) -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(self.url + "/healthz", timeout=1).status_code == 200
        return False

    def stamps(self, since: datetime.datetime) -> list[datetime.datetime]:
        """When each request to the API (/v1alpha3) reached it from `since` on (its log's time)."""
        found = []
        for line in self.log.read_text(errors="replace").splitlines():
            if '"GET /v1alpha3/' in line or re.search(r'"(PUT|POST|DELETE) /v1alpha3/', line):
                stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
                if stamp >= since:
                    found.append(stamp)
        return found

    def requests(self) -> Counter[str]:
        """'PUT resource', 'GET operation', ... -> count, from the access log so far."""
        counts: Counter[str] = Counter()
        for line in self.log.read_text(errors="replace").splitlines():
            match = re.search(r'"(GET|PUT|POST|DELETE) (/v1alpha3/\S*)', line)
            if not match:
                continue
            verb, path = match.groups()
            what = "operation" if "/operations" in path else "resource"
            counts[f"{verb} {what}"] += 1
        return counts

    def answered(self, code: int) -> int:
        """Requests to the API (/v1alpha3) answered `code` so far, from the access log."""
        lines = self.log.read_text(errors="replace").splitlines()
        return sum("/v1alpha3/" in line and line.rstrip().endswith(f" {code}") for line in lines)

    def set_faults(self, **faults: float) -> None:
        """Set the host's faults (its admin API), e.g. rateLimitPerSecond=50; 0 clears one."""
        answer = httpx.put(
            self.url + "/admin/v1/faults", json=faults,
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=10,
        )  # fmt: skip
        answer.raise_for_status()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=15)


class OperatorProcess:
    def __init__(
        self,
        kube: Kube,
        host: Host,
        namespace: str | None,
        workdir: Path,
        poll: float,
        *,
        selector: str | None = None,
        settings: dict[str, str] | None = None,
        command: tuple[str, ...] = ("-m", "takoform_operator.cli"),
    ) -> None:
        """The operator for `namespace` (None: every namespace, the CRs matching `selector`);
        `settings`: more TAKOFORM_* settings, by name without the prefix; `command`: what
        the interpreter runs (with `run` and its arguments after it)."""
        self.metrics_port = free_port()
        env = {
            **os.environ,
            "KUBECONFIG": str(kube.operator_kubeconfig),
            "TAKOFORM_HOST_URL": host.url,
            "TAKOFORM_HOST_TOKEN": TOKEN,
            "TAKOFORM_HOST_INSECURE": "true",  # the local reference host is plain http
            "TAKOFORM_METRICS_PORT": str(self.metrics_port),
            "TAKOFORM_METRICS_AUTH": "none",  # scraped without a token
            "TAKOFORM_POLL_READY_SECONDS": str(poll),
            "TAKOFORM_MAX_CONCURRENT_RECONCILES": str(CONCURRENCY),
        }
        env.update({f"TAKOFORM_{name}": value for name, value in (settings or {}).items()})
        if selector:
            env["TAKOFORM_SHARD_SELECTOR"] = selector
        name = namespace or re.sub(r"[^\w.-]", "_", selector or "all")
        self.log = workdir / f"operator-{name}.log"
        where = ["--namespace", namespace] if namespace else []
        self.proc = subprocess.Popen(
            [sys.executable, *command, "run", *where],
            env=env,
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
        )

    def cpu_seconds(self) -> float:
        return cpu_seconds_of(self.proc.pid)

    def peak_rss_mib(self, field: str = "VmHWM") -> float:
        """Its peak RSS (VmHWM), or with `field` "VmRSS" its RSS now."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def _metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5) as answer:
            return str(answer.read().decode())
        return ""

    def loop_lag_max(self) -> float:
        match = re.search(r"^takoform_event_loop_lag_max_seconds (\S+)$", self._metrics(), re.M)
        return float(match.group(1)) if match else float("nan")

    def reconciles(self, kind: str = "", result: str = "") -> float:
        """Its looks so far, every CR's or those of `kind`, of any result or of `result`
        (takoform_reconciles_total)."""
        found = re.findall(r"^takoform_reconciles_total\{([^}]*)\} (\S+)$", self._metrics(), re.M)
        return sum(
            float(value)
            for labels, value in found
            if (not kind or f'kind="{kind}"' in labels)
            and (not result or f'result="{result}"' in labels)
        )

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# -- CRs ---------------------------------------------------------------------------------------


def create_namespace(kube: Kube, namespace: str) -> None:
    """A fresh namespace, granted the benchmark's space on the implicit host (deny by default,
    docs/tenancy.md)."""
    kube.run("create", "namespace", namespace)
    grant = {
        "apiVersion": "operator.takoform.io/v1alpha1",
        "kind": "TakoformSpaceGrant",
        "metadata": {"name": namespace},
        "spec": {"hostRef": "default", "spaces": [SPACE], "namespaces": {"names": [namespace]}},
    }
    kube.run("apply", "-f", "-", stdin=json.dumps(grant))
    if kube.operator_token:  # as the chart binds its connection Secrets in a namespace it serves
        kube.run(
            "create", "rolebinding", f"{OPERATOR_ACCOUNT}-connection-secrets",
            f"--clusterrole={OPERATOR_ACCOUNT}-connection-secrets",
            f"--serviceaccount={RELEASE_NAMESPACE}:{OPERATOR_ACCOUNT}", "--namespace", namespace,
        )  # fmt: skip


def manifests(
    n: int, tag: str, bloated: bool = False, lines: list[tuple[Any, ...]] = LINES
) -> list[dict[str, Any]]:
    """N CRs cycling over `lines` (of LINES); `tag` keeps host names apart between runs (one
    space); `bloated`: each with about 100 KB of foreign labels and annotations."""
    items = []
    for i in range(n):
        kind, _, api_version, parameters = lines[i % len(lines)]
        metadata: dict[str, Any] = {"name": f"{tag}-{i:05d}"}
        if bloated:
            metadata["labels"] = {
                f"bloat.example.org/label-{j:04d}": f"{i:06d}-{j:04d}".ljust(63, "v")
                for j in range(BLOAT_LABELS)
            }
            metadata["annotations"] = {
                f"bloat.example.org/note-{j:02d}": f"{i:06d}".ljust(BLOAT_NOTE, "n")
                for j in range(BLOAT_ANNOTATIONS)
            }
        items.append(
            {
                "apiVersion": api_version,
                "kind": kind,
                "metadata": metadata,
                "spec": {"space": SPACE, "parameters": parameters},
            }
        )
    return items


def _plural(kind: str) -> str:
    return next(plural for k, plural, _, _ in LINES if k == kind)


def _path(item: dict[str, Any], namespace: str) -> str:
    return f"/apis/{item['apiVersion']}/namespaces/{namespace}/{_plural(item['kind'])}"


async def patiently(client: httpx.AsyncClient, method: str, path: str, **kwargs: Any
                    ) -> httpx.Response:  # fmt: skip
    """A request that waits out the API server's 429s (flow control, or a kind's watch cache
    still starting: "storage is (re)initializing") as client-go does, and its 504s (a list
    of large objects on a saturated machine), then must succeed."""
    for _ in range(60):
        answer = await client.request(method, path, **kwargs)
        if not await _waited_out(answer):
            break
    answer.raise_for_status()
    return answer


async def _waited_out(answer: httpx.Response) -> bool:
    """Whether `answer` is one to wait out and ask again (429, 504), once waited."""
    if answer.status_code not in (429, 504):
        return False
    await asyncio.sleep(float(answer.headers.get("Retry-After") or 1))
    return True


async def create_all(kube: Kube, namespace: str, items: list[dict[str, Any]], rate: float | None,
                     created: dict[str, float],
                     arrived: asyncio.Queue[dict[str, Any]] | None = None) -> None:  # fmt: skip
    """POST every CR (at `rate` per second when given), recording when each was created (and
    handing it to `arrived`, when given, as soon as its create is answered)."""
    async with kube.client() as client:
        slots = asyncio.Semaphore(CONCURRENCY)
        start = time.monotonic()

        async def one(i: int, item: dict[str, Any]) -> None:
            if rate:
                await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
            async with slots:
                await patiently(client, "POST", _path(item, namespace), json=item)
                created[f"{item['kind']}/{item['metadata']['name']}"] = time.monotonic()
                if arrived is not None:
                    arrived.put_nowait(item)

        await asyncio.gather(*(one(i, item) for i, item in enumerate(items)))


def _ready(item: dict[str, Any]) -> bool:
    conditions = (item.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


async def ready_now(kube: Kube, namespace: str) -> set[str]:
    """The CRs Ready at this moment (one list per kind), keyed as watch_ready keys them."""
    ready: set[str] = set()
    async with kube.client() as client:
        for kind, plural, api_version, _ in LINES:
            path = f"/apis/{api_version}/namespaces/{namespace}/{plural}"
            items = (await patiently(client, "GET", path)).json()["items"]
            ready |= {f"{kind}/{i['metadata']['name']}" for i in items if _ready(i)}
    return ready


async def watch_ready(kube: Kube, namespace: str, n: int, seen: dict[str, float],
                      timeout: float) -> None:  # fmt: skip
    """Record when each CR is first seen Ready, from one list and then a watch per kind, until
    all N are. A watch costs the API server one event per write; listing N CRs again and again
    would itself load the machine the operator is measured on (and not the minimal script)."""
    deadline = time.monotonic() + timeout
    done = asyncio.Event()

    async def one_kind(client: httpx.AsyncClient, kind: str, path: str) -> None:
        version = ""
        while len(seen) < n:
            if not version:  # first, and after the watch's version expired: list again
                version = await list_pages(client, kind, path)
            left = max(1, int(deadline - time.monotonic()))
            params = {"watch": "1", "resourceVersion": version, "allowWatchBookmarks": "true",
                      "timeoutSeconds": str(min(left, 60))}  # fmt: skip
            async with client.stream("GET", path, params=params, timeout=None) as events:
                if events.status_code != 200:  # not a watch: an answer as `patiently` reads it
                    await events.aread()
                    if events.status_code == 410:
                        version = ""
                    elif not await _waited_out(events):
                        events.raise_for_status()
                    continue
                async for line in events.aiter_lines():
                    if not line:
                        continue
                    event = json.loads(line)
                    if event["type"] == "ERROR":  # 410 Gone: the version is too old
                        version = ""
                        break
                    version = event["object"]["metadata"].get("resourceVersion", version)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        record(kind, [event["object"]])

    async def list_pages(client: httpx.AsyncClient, kind: str, path: str) -> str:
        """List in pages: one answer of 1,000 bloated CRs (100 MB) outlasted the API server's
        60 s request timeout on a loaded machine."""
        params = {"limit": str(LIST_PAGE)}
        while True:
            listed = (await patiently(client, "GET", path, params=params)).json()
            record(kind, listed["items"])
            token = listed["metadata"].get("continue")
            if not token:
                return str(listed["metadata"]["resourceVersion"])
            params = {"limit": str(LIST_PAGE), "continue": token}

    def record(kind: str, items: list[dict[str, Any]]) -> None:
        now = time.monotonic()
        for item in items:
            key = f"{kind}/{item['metadata']['name']}"
            if key not in seen and _ready(item):
                seen[key] = now
        if len(seen) >= n:
            done.set()

    async with kube.client() as client:
        all_ready = asyncio.create_task(done.wait())
        watches = [
            asyncio.create_task(
                one_kind(client, kind, f"/apis/{api_version}/namespaces/{namespace}/{plural}")
            )
            for kind, plural, api_version, _ in LINES
        ]
        try:
            finished, _ = await asyncio.wait(
                [all_ready, *watches], timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            for task in finished:
                task.result()  # a watch that failed says why
            if not done.is_set():
                raise SystemExit(f"only {len(seen)} of {n} Ready after {timeout:.0f} s")
        finally:
            for task in [all_ready, *watches]:
                task.cancel()
            await asyncio.gather(all_ready, *watches, return_exceptions=True)


# -- one measured run --------------------------------------------------------------------------


@dataclass
class Row:
    mode: str
    n: int
    seconds: float
    latencies: list[float]
    host: Counter[str]
    api_writes: Counter[str]
    steady_api_writes: int = 0
    steady_host_mutations: int = 0
    steady_host_reads: int = 0
    rss_mib: float = float("nan")
    #: The operator's RSS at the end of the steady polls, and an idle operator's (no CRs).
    rss_end_mib: float = float("nan")
    idle_rss_mib: float = float("nan")
    cpu_seconds: float = float("nan")
    #: The operator's CPU seconds when all were Ready (start-up included, steady polls not).
    cpu_to_ready: float = float("nan")
    loop_lag: float = float("nan")
    #: CPU seconds of the API server, etcd and host from the operator's start until all were
    #: Ready, and the same for the minimal script's run in this mode (with its own, "client").
    stack: Counter[str] = field(default_factory=Counter)
    minimal_stack: Counter[str] = field(default_factory=Counter)
    extra: dict[str, float] = field(default_factory=dict)


def _writes(
    before: Counter[tuple[str, str, str]], after: Counter[tuple[str, str, str]]
) -> Counter[str]:
    """Writes to the CRs (any subresource), their TakoformBindings and Events between two
    snapshots, by verb."""
    writes: Counter[str] = Counter()
    for (verb, resource, sub), count in (after - before).items():
        if verb in ("POST", "PATCH", "PUT", "DELETE", "APPLY") and (
            resource in PLURALS or resource in (BINDING_PLURAL, "events")
        ):
            writes[f"{verb} {resource}{'/' + sub if sub else ''}"] += count
    return writes


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(kube: Kube, host: Host, workdir: Path, mode: str, n: int, args: Any) -> Row:
    namespace = f"bench-{mode}-{n}-{int(time.time())}"
    create_namespace(kube, namespace)
    items = manifests(n, namespace, bloated=mode == "bloated")
    created: dict[str, float] = {}
    seen: dict[str, float] = {}
    if mode != "stream":
        asyncio.run(create_all(kube, namespace, items, None, created))
    host_before, api_before = host.requests(), kube.request_counts()
    stack_before = stack_cpu(kube, host)
    operator = OperatorProcess(kube, host, namespace, workdir, args.poll)
    profiler = _profile(operator, workdir / f"profile-{mode}-{n}.txt") if args.profile else None
    start = time.monotonic()
    try:
        if mode != "stream":
            asyncio.run(watch_ready(kube, namespace, n, seen, args.timeout))
            latencies = [t - start for t in seen.values()]
        else:

            async def stream() -> None:
                await asyncio.gather(
                    create_all(kube, namespace, items, args.rate, created),
                    watch_ready(kube, namespace, n, seen, args.timeout),
                )

            asyncio.run(stream())
            latencies = [seen[k] - created[k] for k in seen]
        seconds = time.monotonic() - start
        cpu_to_ready = operator.cpu_seconds()
        stack = stack_cpu(kube, host)
        stack.subtract(stack_before)
        host_after, api_after = host.requests(), kube.request_counts()
        writes = _writes(api_before, api_after)
        if mode == "stream":  # the benchmark's own creates are not the operator's writes
            writes.subtract(Counter(f"POST {_plural(key.split('/')[0])}" for key in created))
        row = Row(mode, n, seconds, latencies, host_after - host_before, +writes)
        row.cpu_to_ready = cpu_to_ready
        row.stack = stack
        # Steady state: several poll intervals with nothing to do.
        time.sleep(args.poll * args.steady_polls)
        host_steady = host.requests() - host_after
        api_steady = _writes(api_after, kube.request_counts())
        row.steady_api_writes = sum(api_steady.values())
        row.steady_host_mutations = sum(
            c for k, c in host_steady.items() if not k.startswith("GET")
        )
        row.steady_host_reads = sum(c for k, c in host_steady.items() if k.startswith("GET"))
        row.rss_mib = operator.peak_rss_mib()
        row.rss_end_mib = operator.peak_rss_mib("VmRSS")
        row.idle_rss_mib = args.idle_rss_mib
        row.cpu_seconds = operator.cpu_seconds()
        row.loop_lag = operator.loop_lag_max()
        return row
    finally:
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)
            profiler.wait(timeout=60)
            print(f"profile: {workdir / f'profile-{mode}-{n}.txt'}", file=sys.stderr)
        operator.stop()


def idle_rss(kube: Kube, host: Host, workdir: Path, poll: float) -> float:
    """An idle operator's RSS (MiB): started on an empty namespace, read once it serves its
    metrics and has listed what it watches (a few polls later)."""
    namespace = f"bench-idle-{int(time.time())}"
    create_namespace(kube, namespace)
    operator = OperatorProcess(kube, host, namespace, workdir, poll)
    try:
        wait_until(lambda: not math.isnan(operator.loop_lag_max()), "its metrics", timeout=60)
        time.sleep(2 * poll)
        return operator.peak_rss_mib("VmRSS")
    finally:
        operator.stop()


def _profile(operator: OperatorProcess, output: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling the operator (collapsed stacks, for flame graphs or a grep)."""
    py_spy = str(Path(sys.executable).parent / "py-spy")
    pid = str(operator.proc.pid)
    return subprocess.Popen(
        [py_spy, "record", "--pid", pid, "--rate", "50", "--format", "raw",
         "--output", str(output), "--nonblocking"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


# -- two tenants -------------------------------------------------------------------------------


@dataclass
class TenantsRow:
    #: What the row varies: the scheduling, or the budget against a throttling host.
    condition: str
    n: int
    quiet_seconds: float
    #: The operator's looks at the quiet CR until it was Ready.
    quiet_looks: float
    busy_p50: float
    busy_seconds: float
    #: The host's 429s from the operator's start until the busy namespace was all Ready.
    host_429: int


async def _names(client: httpx.AsyncClient, namespace: str, ready: bool = True) -> set[str]:
    """The CRs of `namespace` that are Ready (ready=False: that have any status)."""
    found = set()
    for kind, plural, api_version, _ in LINES:
        path = f"/apis/{api_version}/namespaces/{namespace}/{plural}"
        for item in (await patiently(client, "GET", path)).json()["items"]:
            if _ready(item) if ready else item.get("status"):
                found.add(f"{kind}/{item['metadata']['name']}")
    return found


def measure_tenants(kube: Kube, host: Host, workdir: Path, n: int, condition: str,
                    settings: dict[str, str], args: Any, poll: float) -> TenantsRow:  # fmt: skip
    """N busy CRs (the Form lines but the last) queued at the operator's start (with
    `settings`); the quiet namespace's one CR (of the last line, so that the operator's looks
    at it are its kind's) is created once as many busy CRs as there are slots have a status
    (their first look done: the churn is under way, most of the N still queued). Its time to
    Ready from its creation and its looks, the busy CRs' time from the operator's start, and
    the host's 429s."""
    run = f"{condition.split()[0]}-{n}-{int(time.time())}"
    busy, quiet = f"bench-busy-{run}", f"bench-quiet-{run}"
    label = {"takoform.io/bench": run}
    for namespace in (busy, quiet):
        create_namespace(kube, namespace)
    items = manifests(n, busy, lines=LINES[:-1])
    (quiet_item,) = manifests(1, quiet, lines=LINES[-1:])
    quiet_kind = quiet_item["kind"]
    for item in [*items, quiet_item]:
        item["metadata"]["labels"] = label
    asyncio.run(create_all(kube, busy, items, None, {}))
    refused = host.answered(429)
    operator = OperatorProcess(
        kube, host, None, workdir, poll, selector=f"takoform.io/bench={run}", settings=settings
    )
    start = time.monotonic()
    seen: dict[str, float] = {}

    async def churn() -> float:
        async with kube.client() as client:
            while len(await _names(client, busy, ready=False)) < min(n, CONCURRENCY):
                if time.monotonic() - start > args.timeout:
                    raise SystemExit("the busy tenant's churn never got under way")
                await asyncio.sleep(0.1)
            created: dict[str, float] = {}
            await create_all(kube, quiet, [quiet_item], None, created)
            while not await _names(client, quiet):
                if time.monotonic() - start > args.timeout:
                    raise SystemExit("the quiet tenant's CR never became Ready")
                await asyncio.sleep(0.05)
            return time.monotonic() - next(iter(created.values()))

    try:
        quiet_seconds = asyncio.run(churn())
        quiet_looks = operator.reconciles(quiet_kind)
        asyncio.run(watch_ready(kube, busy, n, seen, args.timeout))
        latencies = [t - start for t in seen.values()]
        row = TenantsRow(
            condition, n, quiet_seconds, quiet_looks, _percentile(latencies, 0.5),
            time.monotonic() - start, host.answered(429) - refused,
        )  # fmt: skip
        print(f"    quiet CR Ready in {row.quiet_seconds:.2f} s after {row.quiet_looks:.0f} looks, "
              f"busy all Ready in {row.busy_seconds:.1f} s, host 429s {row.host_429}",
              file=sys.stderr, flush=True)  # fmt: skip
        return row
    finally:
        operator.stop()


def measure_throttled(kube: Kube, host: Host, workdir: Path, n: int, args: Any
                      ) -> list[TenantsRow]:  # fmt: skip
    """The two tenants against a host that answers 429 above `args.host_rate` requests per
    second: with the per-namespace budget at the host's rate, and without any budget. At the
    default ready poll (RESTART_POLL): the benchmark's short one would spend the host's rate
    on reading Ready CRs again."""
    rate = args.host_rate
    host.set_faults(rateLimitPerSecond=rate)
    rows = []
    try:
        for budget in args.budgets.split(","):
            condition = f"budget {budget}, host {rate:g}/s"
            print(f"... tenants ({condition}) N={n}", file=sys.stderr, flush=True)
            settings = {"HOST_REQUESTS_PER_SECOND": str(rate)} if budget == "on" else {}
            rows.append(
                measure_tenants(kube, host, workdir, n, condition, settings, args, RESTART_POLL)
            )
    finally:
        host.set_faults(rateLimitPerSecond=0)
    return rows


def report_tenants(rows: list[TenantsRow]) -> None:
    print(
        "\ntwo tenants: N busy CRs queued at start, one quiet CR created once as many have a "
        f"status as there are slots ({CONCURRENCY})"
    )
    print(f"{'condition':24} {'N':>5} {'quiet CR to Ready s':>19} {'quiet looks':>11} "
          f"{'busy p50 s':>10} {'busy all Ready s':>16} {'host 429s':>9}")  # fmt: skip
    for row in rows:
        print(
            f"{row.condition:24} {row.n:>5} {row.quiet_seconds:>19.2f} {row.quiet_looks:>11.0f} "
            f"{row.busy_p50:>10.2f} {row.busy_seconds:>16.1f} {row.host_429:>9}"
        )


# -- idle CRs, and a restart ------------------------------------------------------------------


def ready_namespace(kube: Kube, host: Host, workdir: Path, n: int, args: Any) -> str:
    """A namespace of N CRs, all Ready, and no operator running: the idle and restart rows'."""
    namespace = f"bench-ready-{n}-{int(time.time())}"
    create_namespace(kube, namespace)
    asyncio.run(create_all(kube, namespace, manifests(n, namespace), None, {}))
    operator = OperatorProcess(kube, host, namespace, workdir, args.poll)
    try:
        asyncio.run(watch_ready(kube, namespace, n, {}, args.timeout))
    finally:
        operator.stop()
    return namespace


def first_looks(operator: OperatorProcess, n: int, args: Any) -> None:
    """Until every one of the N CRs had its first look (a look the host budget put off, which
    sends nothing, is none)."""
    wait_until(
        lambda: operator.reconciles() - operator.reconciles(result="put_off") >= n,
        "every CR's first look",
        args.timeout,
        interval=0.1,
    )


@dataclass
class IdleRow:
    ceiling: float
    n: int
    window: float
    reads: int
    cpu_seconds: float


def measure_idle(kube: Kube, host: Host, workdir: Path, namespace: str, n: int, ceiling: float,
                 args: Any) -> IdleRow:  # fmt: skip
    """A fresh operator on N Ready CRs with the idle poll's ceiling at `ceiling`: once every CR
    had its first look, the host's resource reads and the operator's CPU over the window."""
    settings = {"POLL_IDLE_MAX_SECONDS": str(ceiling)}
    operator = OperatorProcess(kube, host, namespace, workdir, args.poll, settings=settings)
    try:
        first_looks(operator, n, args)
        reads, cpu = host.requests()["GET resource"], operator.cpu_seconds()
        time.sleep(args.window)
        reads = host.requests()["GET resource"] - reads
        return IdleRow(ceiling, n, args.window, reads, operator.cpu_seconds() - cpu)
    finally:
        operator.stop()


def report_idle(rows: list[IdleRow], poll: float) -> None:
    print(f"\nidle: N Ready CRs, ready poll {poll:g} s, over the window after every first look")
    print(f"{'idle ceiling s':>14} {'N':>5} {'window s':>8} {'host reads':>10} "
          f"{'reads/CR':>8} {'reads/s':>7} {'operator CPU s':>14}")  # fmt: skip
    for row in rows:
        print(
            f"{row.ceiling:>14g} {row.n:>5} {row.window:>8g} {row.reads:>10} "
            f"{row.reads / row.n:>8.2f} {row.reads / row.window:>7.1f} {row.cpu_seconds:>14.1f}"
        )


@dataclass
class RestartRow:
    spread: float
    rate: float | None  # the host budget, requests/s (None: none)
    n: int
    first_looks_seconds: float
    per_second: list[int]
    put_off: float  # looks the budget put off (nothing sent), until every first look


def measure_restart(kube: Kube, host: Host, workdir: Path, namespace: str, n: int, spread: float,
                    rate: float | None, args: Any) -> RestartRow:  # fmt: skip
    """A fresh operator on N Ready CRs, its start spread at `spread` and its host budget at
    `rate`: the time from its start until every CR had its first look, and the host's requests
    in each second of the first minute."""
    settings = {"START_SPREAD_SECONDS": str(spread)}
    if rate is not None:
        settings["HOST_REQUESTS_PER_SECOND"] = str(rate)
    started = datetime.datetime.now()
    start = time.monotonic()
    operator = OperatorProcess(kube, host, namespace, workdir, RESTART_POLL, settings=settings)
    try:
        first_looks(operator, n, args)
        seconds = time.monotonic() - start
        put_off = operator.reconciles(result="put_off")
        time.sleep(max(0.0, start + 60.0 - time.monotonic()))
    finally:
        operator.stop()
    per_second = [0] * 60
    for stamp in host.stamps(started):
        second = int((stamp - started).total_seconds())
        if second < 60:
            per_second[second] += 1
    return RestartRow(spread, rate, n, seconds, per_second, put_off)


def report_restart(rows: list[RestartRow]) -> None:
    print(f"\nrestart: N Ready CRs, a fresh operator (ready poll {RESTART_POLL:g} s)")
    print(
        f"{'start spread s':>14} {'budget req/s':>12} {'N':>5} {'all first looks s':>17} "
        f"{'host req/s peak':>15} {'busiest 5 s, mean':>17} {'first minute, mean':>18} "
        f"{'put off':>8}"
    )
    for row in rows:
        busiest = max(sum(row.per_second[i : i + 5]) for i in range(56)) / 5
        budget = f"{row.rate:g}" if row.rate is not None else "-"
        print(
            f"{row.spread:>14g} {budget:>12} {row.n:>5} {row.first_looks_seconds:>17.1f} "
            f"{max(row.per_second):>15} {busiest:>17.1f} {sum(row.per_second) / 60:>18.1f} "
            f"{row.put_off:>8.0f}"
        )
    for row in rows:
        print(f"spread {row.spread:g} budget {row.rate} N={row.n}: host requests per second: "
              f"{row.per_second}")  # fmt: skip


# -- the minimal script ------------------------------------------------------------------------


async def minimal(
    kube: Kube, host: Host, n: int, rate: float | None = None
) -> tuple[float, Counter[str]]:
    """The same end state with nothing but asyncio and two HTTP clients: create each host
    resource, wait for its operation, read it, write the CR's status once. Without `rate` the
    CRs exist before it starts (backlog); with it they are created at that rate while it runs
    (stream), each taken up once its create is answered, and the time counts from the first
    create, as the operator's stream row does. Returns that time and the CPU seconds the API
    server, etcd, the host and the script itself ("client") used in it."""
    namespace = f"bench-minimal-{n}-{int(time.time())}"
    create_namespace(kube, namespace)
    items = manifests(n, namespace)
    arrived: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    if rate is None:
        await create_all(kube, namespace, items, None, {}, arrived)
    refs: dict[str, dict[str, str]] = {}
    async with (
        httpx.AsyncClient(
            base_url=host.url,
            headers={"Authorization": f"Bearer {TOKEN}"},
            limits=httpx.Limits(max_connections=CONCURRENCY),
            timeout=60,
        ) as hosts,
        kube.client(as_operator=True) as api,
    ):
        for item in (await hosts.get("/v1alpha3/forms")).json()["items"]:
            ref = item["formRef"]
            refs.setdefault(f"{ref['apiVersion']} {ref['kind']}", ref)
        start = time.monotonic()
        before = stack_cpu(kube, host) + Counter({"client": time.process_time()})

        async def read(path: str, **kwargs: Any) -> httpx.Response:
            # A kept connection the host closed as it was reused fails the read; the operator's
            # host client retries such a read too (TAKOFORM_HOST_READ_RETRIES).
            for attempt in range(3):
                try:
                    return await hosts.get(path, **kwargs)
                except httpx.TransportError:
                    if attempt == 2:
                        raise
            raise AssertionError("unreachable")

        async def one(item: dict[str, Any]) -> None:
            ref = refs[f"{item['apiVersion']} {item['kind']}"]
            group, version = item["apiVersion"].split("/")
            name = item["metadata"]["name"]
            form = f"/v1alpha3/spaces/{SPACE}/forms/{group}/{version}/{item['kind']}"
            path = f"{form}/resources/{name}"
            exact = {k: ref[k] for k in ("definitionVersion", "schemaDigest")}
            body = {"spec": item["spec"]["parameters"]}
            answer = await hosts.put(path, params=exact, json=body, headers={"If-None-Match": "*"})
            answer.raise_for_status()
            operation = answer.json()["id"]
            delay = 0.05
            while (await read(f"/v1alpha3/operations/{operation}")).json()["state"] == "running":
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
            resource = (await read(path, params=exact)).json()
            status = {"status": {"uid": resource["metadata"]["uid"], "conditions": [
                {"type": "Ready", "status": "True", "reason": "Available",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}  # fmt: skip
            await patiently(
                api, "PATCH", _path(item, namespace) + f"/{item['metadata']['name']}/status",
                json=status, headers={"Content-Type": "application/merge-patch+json"},
            )  # fmt: skip

        failures: list[BaseException] = []

        async def worker() -> None:  # CONCURRENCY of them: the operator's reconcile slots
            while True:
                item = await arrived.get()
                try:
                    await one(item)
                except Exception as exc:  # reported after the run; the others go on
                    failures.append(exc)
                finally:
                    arrived.task_done()

        workers = [asyncio.create_task(worker()) for _ in range(CONCURRENCY)]
        if rate is not None:
            await create_all(kube, namespace, items, rate, {}, arrived)
        await arrived.join()
        seconds = time.monotonic() - start
        stack = stack_cpu(kube, host) + Counter({"client": time.process_time()})
        stack.subtract(before)
        for task in workers:
            task.cancel()
        if failures:
            raise failures[0]
        return seconds, stack


# -- main --------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100,1000,5000")
    parser.add_argument("--modes", default="backlog,bloated,stream,tenants,throttled")
    parser.add_argument(
        "--schedulings", default="fair,fifo", help="tenants mode: TAKOFORM_RECONCILE_SCHEDULING "
        "values to measure, in this order",
    )  # fmt: skip
    parser.add_argument(
        "--host-rate", type=float, default=20.0,
        help="throttled mode: requests per second the host takes (429 above)",
    )  # fmt: skip
    parser.add_argument(
        "--budgets", default="on,off", help="throttled mode: the per-namespace budget (at the "
        "host's rate) on, off, in this order",
    )  # fmt: skip
    parser.add_argument("--rate", type=float, default=100.0, help="stream mode: CRs per second")
    parser.add_argument("--poll", type=float, default=5.0, help="the operator's ready poll (s)")
    parser.add_argument("--steady-polls", type=int, default=3)
    parser.add_argument(
        "--window", type=float, default=120.0, help="idle mode: seconds the reads are counted"
    )
    parser.add_argument(
        "--spreads", default="0,30", help="restart mode: TAKOFORM_START_SPREAD_SECONDS values"
    )
    parser.add_argument(
        "--restart-rates", default="200",
        help="restart mode: TAKOFORM_HOST_REQUESTS_PER_SECOND values, each a row at the default "
        "spread ('' for none)",
    )  # fmt: skip
    parser.add_argument(
        "--timeout", type=float, default=None,
        help="seconds for all to be Ready (default 1,800, or 0.3 s per CR above 6,000)",
    )  # fmt: skip
    parser.add_argument("--no-minimal", action="store_true", help="skip the minimal script")
    parser.add_argument(
        "--credentials", choices=["serviceaccount", "certificate"], default="serviceaccount",
        help="what the operator and the minimal script authenticate with: the chart's "
        "ServiceAccount (a token, as in a cluster) or the admin's client certificate",
    )  # fmt: skip
    parser.add_argument(
        "--profile", action="store_true", help="sample the operator with py-spy (a test extra)"
    )
    args = parser.parse_args()
    if args.timeout is None:
        args.timeout = max(1800.0, 0.3 * max(int(s) for s in args.sizes.split(",")))
    sizes = [int(s) for s in args.sizes.split(",")]
    modes = args.modes.split(",")

    workdir = Path(tempfile.mkdtemp(prefix="takoform-bench-"))
    rows: list[Row] = []
    tenants: list[TenantsRow] = []
    idle: list[IdleRow] = []
    restarts: list[RestartRow] = []
    # Every row runs on a control plane and a host of its own: what an earlier row left (its CRs,
    # and the TakoformBindings every process lists and checks at its start) weighs on none after.
    stacks = itertools.count()

    def stack() -> contextlib.AbstractContextManager[tuple[Kube, Host]]:
        return _stack(workdir / f"stack-{next(stacks)}", args.credentials)

    args.idle_rss_mib = float("nan")
    if set(modes) - {"tenants", "throttled", "idle", "restart"}:
        with stack() as (kube, host):
            args.idle_rss_mib = idle_rss(kube, host, workdir, args.poll)
        print(f"... idle operator: RSS {args.idle_rss_mib:.0f} MiB", file=sys.stderr)
    for n in sizes:
        for mode in modes:
            if mode == "tenants":
                for scheduling in args.schedulings.split(","):
                    print(f"... tenants ({scheduling}) N={n}", file=sys.stderr, flush=True)
                    settings = {"RECONCILE_SCHEDULING": scheduling}
                    with stack() as (kube, host):
                        tenants.append(measure_tenants(
                            kube, host, workdir, n, scheduling, settings, args, args.poll
                        ))  # fmt: skip
                continue
            if mode == "throttled":
                with stack() as (kube, host):
                    tenants += measure_throttled(kube, host, workdir, n, args)
                continue
            if mode == "idle":
                with stack() as (kube, host):
                    namespace = ready_namespace(kube, host, workdir, n, args)
                    for ceiling in (args.poll, 10 * args.poll):
                        print(f"... idle (ceiling {ceiling:g} s) N={n}", file=sys.stderr,
                              flush=True)  # fmt: skip
                        idle.append(measure_idle(kube, host, workdir, namespace, n, ceiling, args))
                continue
            if mode == "restart":
                with stack() as (kube, host):
                    namespace = ready_namespace(kube, host, workdir, n, args)
                    plans: list[tuple[float, float | None]] = [
                        (float(s), None) for s in args.spreads.split(",")
                    ] + [(30.0, float(r)) for r in args.restart_rates.split(",") if r]
                    for spread, rate in plans:
                        print(f"... restart (spread {spread:g} s, budget {rate}) N={n}",
                              file=sys.stderr, flush=True)  # fmt: skip
                        restarts.append(
                            measure_restart(kube, host, workdir, namespace, n, spread, rate, args)
                        )
                continue
            print(f"... {mode} N={n}", file=sys.stderr, flush=True)
            with stack() as (kube, host):
                rows.append(measure(kube, host, workdir, mode, n, args))
            print(f"    {progress(rows[-1])}", file=sys.stderr, flush=True)
        measured = sorted({_script_mode(row.mode) for row in rows if row.n == n})
        for mode in [] if args.no_minimal else measured:
            print(f"... minimal script N={n} ({mode})", file=sys.stderr, flush=True)
            rate = args.rate if mode == "stream" else None
            with stack() as (kube, host):
                baseline, minimal_stack = asyncio.run(minimal(kube, host, n, rate))
            print(f"    all done in {baseline:.1f} s", file=sys.stderr, flush=True)
            for row in rows:
                if row.n == n:
                    row.extra[f"minimal_{mode}_seconds"] = baseline
                    if _script_mode(row.mode) == mode:
                        row.minimal_stack = minimal_stack
    if rows:
        report(rows)
    if tenants:
        report_tenants(tenants)
    if idle:
        report_idle(idle, args.poll)
    if restarts:
        report_restart(restarts)
    return 0


@contextlib.contextmanager
def _stack(workdir: Path, credentials: str) -> Iterator[tuple[Kube, Host]]:
    """A new control plane with the CRDs (and the operator's ServiceAccount, with
    `credentials` "serviceaccount"), and a new reference host, under `workdir`."""
    workdir.mkdir(parents=True)
    cluster = localcluster.LocalCluster(workdir / "cluster", die_with_parent=True)
    cluster.start()
    host: Host | None = None
    try:
        kube = kube_from(cluster)
        kube.run("apply", "--server-side", "-f", str(REPO / "crds"))
        kube.run("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        if credentials == "serviceaccount":
            run_as_service_account(kube, cluster.tools.helm, workdir)
        host = Host(workdir)
        yield kube, host
    finally:
        if host is not None:
            host.stop()
        cluster.stop()


def _script_mode(mode: str) -> str:
    """The minimal script's run a row is compared with: a bloated row is a backlog."""
    return "stream" if mode == "stream" else "backlog"


def _per_cr_kib(row: Row, rss_mib: float) -> float:
    return (rss_mib - row.idle_rss_mib) * 1024 / row.n


def progress(row: Row) -> str:
    """A row's main figures as soon as it is measured: a long run that dies later keeps them."""
    return (
        f"all Ready in {row.seconds:.1f} s ({row.n / row.seconds:.1f} CRs/s), p99 "
        f"{_percentile(row.latencies, 0.99):.2f} s, CPU/CR {1000 * row.cpu_to_ready / row.n:.1f} "
        f"ms, RSS {row.rss_mib:.0f} MiB (per CR {_per_cr_kib(row, row.rss_mib):.1f} KiB; at "
        f"the end {_per_cr_kib(row, row.rss_end_mib):.1f} KiB), lag {row.loop_lag:.2f} s"
    )


def _cpu_split(row: Row) -> str:
    """The whole stack's CPU per CR for the operator's row, and for the minimal script's."""
    operator = row.stack + Counter({"operator": row.cpu_to_ready})
    parts = [f"operator's row {_per_cr(operator, row.n)}"]
    if row.minimal_stack:
        parts.append(f"minimal script's {_per_cr(row.minimal_stack, row.n)}")
    return "; ".join(parts)


def _per_cr(cpu: Counter[str], n: int) -> str:
    total = sum(cpu.values())
    each = ", ".join(f"{name} {1000 * seconds / n:.1f}" for name, seconds in cpu.items())
    return f"{1000 * total / n:.1f} ({each})"


def report(rows: list[Row]) -> None:
    header = (
        f"{'mode':8} {'N':>5} {'all Ready s':>11} {'CRs/s':>7} {'p50 s':>7} {'p99 s':>7} "
        f"{'minimal s':>9} {'ratio':>6} {'API writes/CR':>13} {'host req/CR':>11} "
        f"{'steady W/M/R':>13} {'RSS MiB':>8} {'KiB/CR':>6} {'end':>6} {'CPU s':>7} "
        f"{'CPU/CR ms':>9} {'lag s':>6}"
    )
    print(header)
    for row in rows:
        minimal_s = row.extra.get(f"minimal_{_script_mode(row.mode)}_seconds", float("nan"))
        api_per = sum(row.api_writes.values()) / row.n
        host_per = sum(row.host.values()) / row.n
        reads = row.steady_host_reads / row.n
        steady = f"{row.steady_api_writes}/{row.steady_host_mutations}/{reads:.1f}"
        print(
            f"{row.mode:8} {row.n:>5} {row.seconds:>11.1f} {row.n / row.seconds:>7.1f} "
            f"{_percentile(row.latencies, 0.5):>7.2f} {_percentile(row.latencies, 0.99):>7.2f} "
            f"{minimal_s:>9.1f} {row.seconds / minimal_s:>6.2f} {api_per:>13.2f} {host_per:>11.2f} "
            f"{steady:>13} {row.rss_mib:>8.0f} {_per_cr_kib(row, row.rss_mib):>6.1f} "
            f"{_per_cr_kib(row, row.rss_end_mib):>6.1f} {row.cpu_seconds:>7.1f} "
            f"{1000 * row.cpu_to_ready / row.n:>9.1f} {row.loop_lag:>6.2f}"
        )
    print()
    for row in rows:
        writes = ", ".join(f"{k} {v / row.n:.2f}" for k, v in sorted(row.api_writes.items()))
        hosts = ", ".join(f"{k} {v / row.n:.2f}" for k, v in sorted(row.host.items()))
        print(f"{row.mode} N={row.n}: API writes per CR: {writes}")
        print(f"{row.mode} N={row.n}: host requests per CR: {hosts}")
        print(f"{row.mode} N={row.n}: CPU ms per CR until all Ready: {_cpu_split(row)}")
        if row.mode == "stream" and "minimal_backlog_seconds" in row.extra:
            backlog = row.extra["minimal_backlog_seconds"]
            print(f"stream N={row.n}: ratio to the backlog minimal script ({backlog:.1f} s): "
                  f"{row.seconds / backlog:.2f}")  # fmt: skip
    print(
        "\nsteady W/M/R: API writes, host mutations and host reads per CR over the steady "
        "polls; ratio: the operator's all-Ready time / the minimal script's in the same mode; "
        "CPU s: the operator's CPU from its start to the end of the steady polls; CPU/CR: its "
        "CPU from its start until all were Ready, per CR; KiB/CR: the peak RSS less an idle "
        f"operator's ({rows[0].idle_rss_mib:.0f} MiB), per CR; end: the same at the end of the "
        "steady polls."
    )


if __name__ == "__main__":
    sys.exit(main())
