"""pytest fixtures for tests that need a real Kubernetes API server.

- ``kube_cluster`` (session): starts the local control plane of localcluster.py (etcd +
  kube-apiserver + kube-controller-manager) once per test session and stops it at the end. With
  ``TAKOFORM_USE_EXISTING_CLUSTER=1`` and ``KUBECONFIG`` set it uses that cluster instead (e.g. a
  kind cluster) and starts nothing.
- ``kube_namespace`` (function): a fresh namespace per test, deleted afterwards.
- ``kube_crds`` (session): the project's ``crds/*.yaml`` applied and Established.
- ``kube_tools`` (session): paths of the pinned helm / promtool / kubectl binaries.

Tests using them should be marked ``@pytest.mark.kube``.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import ssl
import subprocess
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import runners
import waiting
import yaml

import localcluster

REPO = Path(__file__).resolve().parents[2]


#: Waits on the API server poll every 0.2 s: each probe is a kubectl process.
wait_until = functools.partial(waiting.wait_until, interval=0.2)


@dataclass(frozen=True)
class KubeTools:
    kubectl: Path
    helm: Path | None
    promtool: Path | None
    prometheus: Path | None


@dataclass
class KubeCluster:
    """What the tests get: where the API server is and how to talk to it."""

    kubeconfig: Path
    server: str
    kubectl_bin: Path
    existing: bool  # True when TAKOFORM_USE_EXISTING_CLUSTER=1 (not started by us)
    scratch: Path  # a private temporary directory (e.g. for token kubeconfigs)
    _token_configs: dict[str, Path] = field(default_factory=dict, repr=False)
    _discovered: Served | None = field(default=None, repr=False)

    def kubectl(
        self,
        *args: str,
        namespace: str | None = None,
        input: str | None = None,
        check: bool = True,
        token: str | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster; text in/out. With `check` (default) a non-zero
        exit raises AssertionError showing the command and its stderr. `token` makes the call
        as that bearer token instead of the kubeconfig's user."""
        kubeconfig = self.token_kubeconfig(token) if token else self.kubeconfig
        return runners.kubectl(
            self.kubectl_bin,
            kubeconfig,
            *args,
            namespace=namespace,
            input=input,
            check=check,
            timeout=timeout,
        )

    def token_kubeconfig(self, token: str) -> Path:
        # A kubeconfig whose only credential is the bearer token: with the admin client
        # certificate still present, the API server would authenticate the certificate instead.
        if token not in self._token_configs:
            config = self.kubectl_json("config", "view", "--minify", "--raw", "--flatten")
            config["users"][0]["user"] = {"token": token}
            path = self.scratch / f"token-{len(self._token_configs)}.kubeconfig"
            path.write_text(json.dumps(config))
            path.chmod(0o600)
            self._token_configs[token] = path
        return self._token_configs[token]

    def kubectl_json(self, *args: str, namespace: str | None = None) -> Any:
        """kubectl ... -o json, parsed."""
        return json.loads(self.kubectl(*args, "-o", "json", namespace=namespace).stdout)

    def apply(self, manifest: str, namespace: str | None = None) -> None:
        """Apply YAML/JSON text (one object, several, or a List) as `kubectl apply --server-side
        --force-conflicts` does: each object a server-side apply under kubectl's field manager,
        over the kept HTTPS connection (a kubectl process costs about 70 ms of CPU, and the
        suite applies hundreds of manifests on each worker). Objects without a namespace go to
        `namespace`, else `default`. A refused object fails the test with the API server's
        message. Without certificate files (an existing cluster), or for a kind the API server
        does not serve, kubectl applies the manifest."""
        client = self.http()
        objects = _objects(manifest)
        paths = [self._apply_path(obj, namespace) for obj in objects] if client else []
        if client is None or None in paths:
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                         namespace=namespace, input=manifest)  # fmt: skip
            return
        for obj, path in zip(objects, paths, strict=True):
            answer = client.patch(
                f"{path}/{obj['metadata']['name']}",
                params={"fieldManager": "kubectl", "force": "true"},
                content=json.dumps(obj).encode(),
                headers={"Content-Type": "application/apply-patch+yaml"},
            )
            if not answer.is_success:
                raise AssertionError(
                    f"apply {obj.get('kind')}/{obj['metadata']['name']}: {answer.status_code} "
                    f"{_message(answer)}"
                )

    def get_object(self, kind: str, name: str, namespace: str | None = None) -> Any:
        """One object, as `kubectl get KIND NAME -o json` gives it, or None when it does not
        exist. Read over the kept HTTPS connection: a kubectl process costs about 70 ms of CPU,
        and a wait polls several times a second, on every worker. A cluster whose kubeconfig
        holds no client certificate files (an existing cluster) is read through kubectl."""
        client, path = self.http(), self._collection(kind, namespace)
        if client is None or path is None:
            found = self.kubectl("get", kind, name, "-o", "json", namespace=namespace, check=False)
            return json.loads(found.stdout) if found.returncode == 0 else None
        answer = client.get(f"{path}/{name}")
        if answer.status_code == 404:
            return None
        answer.raise_for_status()
        found = answer.json()
        found["metadata"].pop("managedFields", None)  # as kubectl shows it
        return found

    def list_objects(
        self, kind: str, namespace: str | None = None, selector: str | None = None
    ) -> list[Any]:
        """The objects of a kind (`kubectl get KIND [-l SELECTOR] -o json`'s items), over the
        kept connection as get_object reads one."""
        client, path = self.http(), self._collection(kind, namespace)
        if client is None or path is None:
            where = ["-l", selector] if selector else []
            return list(self.kubectl_json("get", kind, *where, namespace=namespace)["items"])
        answer = client.get(path, params={"labelSelector": selector} if selector else None)
        answer.raise_for_status()
        items = list(answer.json()["items"])
        for item in items:
            item["metadata"].pop("managedFields", None)
        return items

    def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        """Delete one object without waiting for it to go (`kubectl delete --wait=false`); an
        object that is not there is no error."""
        client, path = self.http(), self._collection(kind, namespace)
        if client is None or path is None:
            self.kubectl("delete", kind, name, "--wait=false", "--ignore-not-found",
                         namespace=namespace)  # fmt: skip
            return
        answer = client.delete(f"{path}/{name}")
        if answer.status_code not in (200, 202, 404):
            raise AssertionError(f"delete {kind}/{name}: {answer.status_code} {_message(answer)}")

    def create_namespace(self, name: str) -> None:
        """`kubectl create namespace NAME`."""
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        self.apply(json.dumps(namespace))

    def _collection(self, kind: str, namespace: str | None) -> str | None:
        """The API path of a kind's objects (in `namespace` for a namespaced kind) by any name
        kubectl takes for it, or None (not served; namespaced and no namespace given)."""
        found = self._resource(lambda served: served.by_name.get(kind.lower()))
        return _path(found, namespace) if found else None

    def _apply_path(self, obj: dict[str, Any], namespace: str | None) -> str | None:
        """The API path of the collection `obj` is applied to, or None for a kind not served."""
        key = (obj.get("apiVersion", ""), obj.get("kind", ""))
        found = self._resource(lambda served: served.by_kind.get(key))
        own = obj["metadata"].get("namespace")
        if own and namespace and own != namespace:
            raise AssertionError(f"{obj['kind']}/{obj['metadata']['name']} names namespace "
                                 f"{own!r}, applied to {namespace!r}")  # fmt: skip
        return _path(found, own or namespace or "default") if found else None

    def _resource(self, lookup: Callable[[Served], Resource | None]) -> Resource | None:
        """What `lookup` finds in the discovery; on a miss, discovery is read once more (a CRD
        added since the last look)."""
        found = lookup(self.served())
        if found is None and self._discovered is not None:
            self._discovered = None
            found = lookup(self.served())
        return found

    def served(self) -> Served:
        """What the API server serves, from its discovery (once, and again for a new kind)."""
        client = self.http()
        if self._discovered is None and client is not None:
            self._discovered = _discover(client)
        return self._discovered or Served({}, {})

    def http(self) -> httpx.Client | None:
        """The kept HTTPS client of this cluster (None: the kubeconfig has no certificate
        files, as with an existing cluster; use kubectl then)."""
        return _http_client(self.kubeconfig, self.server) if self.server else None

    def create_raw(self, path: str, body: bytes) -> tuple[bool, str]:
        """POST `body` to the API path as it is, nothing parsed or refused on the client side
        (`kubectl create --raw`): (created, the API server's answer). Over the kept HTTPS
        connection when the kubeconfig has certificate files, else through kubectl."""
        client = self.http()
        if client is None:
            raw = self.scratch / f"raw-{uuid.uuid4().hex}.json"
            raw.write_bytes(body)
            done = self.kubectl("create", "--raw", path, "-f", str(raw), check=False, timeout=120)
            raw.unlink()
            return done.returncode == 0, done.stdout + done.stderr
        answer = client.post(
            path, content=body, headers={"Content-Type": "application/json"}, timeout=120
        )
        return answer.is_success, answer.text

    def api_client(self) -> Any:
        """A `kubernetes` (Python client) ApiClient for this cluster."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))


def _objects(manifest: str) -> list[dict[str, Any]]:
    """The objects of a manifest: its YAML/JSON documents, a List's items each on its own."""
    found: list[dict[str, Any]] = []
    for doc in yaml.safe_load_all(manifest):
        if not doc:
            continue
        found.extend(doc["items"] if doc.get("kind", "").endswith("List") else [doc])
    return found


def _message(answer: httpx.Response) -> str:
    try:
        return str(answer.json().get("message", answer.text))
    except ValueError:
        return answer.text


#: Where a kind's objects are: (API path prefix, plural, namespaced).
Resource = tuple[str, str, bool]


@dataclass(frozen=True)
class Served:
    """The API server's discovery: each kind by its apiVersion and kind, and by every name
    kubectl takes for it (kind, singular, plural, short names, plural.group)."""

    by_kind: dict[tuple[str, str], Resource]
    by_name: dict[str, Resource]


def _discover(client: httpx.Client) -> Served:
    groups = client.get("/apis")
    groups.raise_for_status()
    versions = ["v1", *(v["groupVersion"] for g in groups.json()["groups"] for v in g["versions"])]
    by_kind: dict[tuple[str, str], Resource] = {}
    by_name: dict[str, Resource] = {}
    for version in versions:
        prefix = "/api/v1" if version == "v1" else f"/apis/{version}"
        listed = client.get(prefix)
        if listed.status_code != 200:  # an aggregated API that is not there
            continue
        group = version.rpartition("/")[0]
        for resource in listed.json()["resources"]:
            plural = resource["name"]
            if "/" in plural:  # a subresource
                continue
            where = (prefix, plural, bool(resource["namespaced"]))
            by_kind.setdefault((version, resource["kind"]), where)
            names = [resource["kind"].lower(), resource.get("singularName"), plural,
                     *resource.get("shortNames", [])]  # fmt: skip
            if group:
                names.append(f"{plural}.{group}")
            for name in filter(None, names):
                by_name.setdefault(name, where)  # the first group listed wins, as in kubectl
    return Served(by_kind, by_name)


def _path(resource: Resource, namespace: str | None) -> str | None:
    prefix, plural, namespaced = resource
    if not namespaced:
        return f"{prefix}/{plural}"
    return f"{prefix}/namespaces/{namespace}/{plural}" if namespace else None


@functools.cache
def _http_client(kubeconfig: Path, server: str) -> httpx.Client | None:
    """A client with the kubeconfig's CA and client certificate files, or None without them."""
    config = yaml.safe_load(kubeconfig.read_text())
    try:
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        ca = cluster["certificate-authority"]
        cert, key = user["client-certificate"], user["client-key"]
    except (KeyError, IndexError, TypeError):
        return None
    context = ssl.create_default_context(cafile=ca)
    context.load_cert_chain(cert, key)
    return httpx.Client(base_url=server, verify=context, timeout=30)


def _tools() -> KubeTools:
    try:
        t = localcluster.Tools.locate()
        return KubeTools(t.kubectl, t.helm if t.helm.exists() else None, t.promtool, t.prometheus)
    except localcluster.ClusterError:
        # With an existing cluster the cache may be absent: fall back to PATH.
        kubectl = shutil.which("kubectl")
        if not kubectl or os.environ.get("TAKOFORM_USE_EXISTING_CLUSTER") != "1":
            raise

        def which(name: str) -> Path | None:
            found = shutil.which(name)
            return Path(found) if found else None

        return KubeTools(Path(kubectl), which("helm"), which("promtool"), which("prometheus"))


@pytest.fixture(scope="session")
def kube_tools() -> KubeTools:
    """Paths of the pinned kubectl/helm/promtool (fails, rather than skips, if not built)."""
    try:
        return _tools()
    except localcluster.ClusterError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def kube_cluster(
    tmp_path_factory: pytest.TempPathFactory, kube_tools: KubeTools
) -> Iterator[KubeCluster]:
    """The real API server for this session (local control plane, or an existing cluster)."""
    scratch = tmp_path_factory.mktemp("kube-scratch")
    if os.environ.get("TAKOFORM_USE_EXISTING_CLUSTER") == "1":
        kubeconfig = os.environ.get("KUBECONFIG")
        if not kubeconfig:
            pytest.fail("TAKOFORM_USE_EXISTING_CLUSTER=1 needs KUBECONFIG", pytrace=False)
        cluster = KubeCluster(
            Path(kubeconfig.split(os.pathsep)[0]), "", kube_tools.kubectl, True, scratch
        )
        cluster.server = cluster.kubectl(
            "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"
        ).stdout
        yield cluster
        return

    local = localcluster.LocalCluster(
        tmp_path_factory.mktemp("control-plane"), die_with_parent=True
    )
    try:
        local.start()
    except localcluster.ClusterError as exc:
        pytest.fail(f"could not start the local control plane: {exc}", pytrace=False)
    try:
        yield KubeCluster(local.kubeconfig, local.server, kube_tools.kubectl, False, scratch)
    finally:
        local.stop()


def _namespace_name(test_name: str) -> str:
    # RFC 1123 label: lower-case alphanumerics and '-', at most 63 characters.
    base = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:40].strip("-")
    return f"t-{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def kube_namespace(kube_cluster: KubeCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test; deleted (without waiting) afterwards."""
    name = _namespace_name(request.node.name)
    kube_cluster.create_namespace(name)
    # Pods need the namespace's `default` ServiceAccount (the controller-manager creates it).
    wait_until(
        lambda: kube_cluster.get_object("serviceaccount", "default", name) is not None,
        f"the default ServiceAccount in {name}",
    )
    yield name
    drop_namespace(kube_cluster, name)


@pytest.fixture
def namespaces(kube_cluster: KubeCluster) -> Iterator[Callable[[str], str]]:
    """More namespaces for one test: `make(prefix)` creates one; all dropped afterwards."""
    made: list[str] = []

    def make(prefix: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        kube_cluster.create_namespace(name)
        made.append(name)
        return name

    yield make
    for name in made:
        drop_namespace(kube_cluster, name)


def drop_namespace(cluster: KubeCluster, name: str) -> None:
    """Delete a test's namespace (without waiting) and the TakoformBindings its CRs hold:
    bindings are cluster-scoped, and a CR left in a namespace still terminating would otherwise
    make another test's CR of the same host resource name AlreadyManaged. The finalizers of the
    CRs go first: their operator is gone, and a namespace kept terminating by them is retried
    by the namespace controller (a list and a delete of every namespaced kind) for as long as
    the control plane runs."""
    release_finalizers(cluster, name)
    cluster.delete("namespace", name)
    drop_bindings(cluster, f"takoform.io/namespace={name}")


#: What a test's clean-up writes on a Bound binding whose operator is gone: the override the
#: bindings' admission policy allows (`kubectl takoform release --force` writes the same).
FORCED = {"metadata": {"annotations": {"takoform.io/force-release": "test clean-up"}}}
UNPROTECTED = {"metadata": {"finalizers": None}}


def drop_bindings(cluster: KubeCluster, selector: str) -> None:
    """Delete the TakoformBindings the label selector names, protected ones included: their
    operator is gone, so the clean-up lifts the protection itself (forced, then without the
    finalizer) before the delete. The API server answers 429 while a CRD another test
    re-applied is being served again: asked again until it answers."""
    client = cluster.http()
    if client is None:  # an existing cluster: kubectl, as far as it goes
        listed = cluster.kubectl("get", "takoformbindings", "-l", selector, "-o", "name",
                                 check=False)  # fmt: skip
        for name in listed.stdout.split() if listed.returncode == 0 else ():
            for patch in (FORCED, UNPROTECTED):
                cluster.kubectl("patch", name, "--type=merge", "-p", json.dumps(patch),
                                check=False)  # fmt: skip
        cluster.kubectl("delete", "takoformbindings", "-l", selector, "--wait=false", check=False)
        return
    bindings = cluster._collection("takoformbindings", None)
    if bindings is None:
        return  # the CRDs are not installed: no binding to drop
    waiting.wait_for(
        lambda: _dropped(client, bindings, selector),
        f"the TakoformBindings {selector} deleted",
        timeout=30,
    )


def _dropped(client: httpx.Client, bindings: str, selector: str) -> bool:
    """One try of drop_bindings over the kept connection: False when the API server said 429."""
    merge = {"Content-Type": "application/merge-patch+json"}
    listed = client.get(bindings, params={"labelSelector": selector})
    if listed.status_code == 429:
        return False
    listed.raise_for_status()
    for found in listed.json()["items"]:
        if found["metadata"].get("finalizers"):
            path = f"{bindings}/{found['metadata']['name']}"
            for patch in (FORCED, UNPROTECTED):
                if client.patch(path, content=json.dumps(patch), headers=merge).status_code == 429:
                    return False
    return client.delete(bindings, params={"labelSelector": selector}).status_code != 429


#: The API groups of the project's kinds (takoform.io, storage.takoform.io, ...).
GROUPS = "takoform.io"


def release_finalizers(cluster: KubeCluster, namespace: str) -> None:
    """Remove the finalizers of the project's CRs in `namespace` (over the kept connection;
    nothing where the kubeconfig has no certificate files)."""
    client = cluster.http()
    if client is None:
        return
    prefixes = {
        (prefix, plural)
        for prefix, plural, namespaced in cluster.served().by_kind.values()
        if namespaced and prefix.startswith("/apis/") and prefix.split("/")[2].endswith(GROUPS)
    }
    for prefix, plural in sorted(prefixes):
        listed = client.get(f"{prefix}/namespaces/{namespace}/{plural}")
        if listed.status_code != 200:
            continue
        try:
            items = listed.json().get("items", [])
            names = [i["metadata"]["name"] for i in items if i["metadata"].get("finalizers")]
        except (ValueError, RecursionError):  # a CR nested too deep for Python (test_poisoned)
            kind = f"{plural}.{prefix.split('/')[2]}"
            found = cluster.kubectl("get", kind, "-o", "name", namespace=namespace, check=False)
            names = [line.rsplit("/", 1)[-1] for line in found.stdout.split()]
        for name in names:
            client.patch(
                f"{prefix}/namespaces/{namespace}/{plural}/{name}",
                content=b'{"metadata":{"finalizers":null}}',
                headers={"Content-Type": "application/merge-patch+json"},
            )


def crd_files(crd_dir: Path = REPO / "crds") -> Sequence[Path]:
    """The project's CRD manifests (crds/*.yaml), sorted."""
    return sorted(crd_dir.glob("*.yaml"))


def apply_crds(cluster: KubeCluster, files: Sequence[Path], timeout: int = 60) -> list[Any]:
    """Apply CRD manifests (server-side: big schemas overflow the client-side annotation), wait
    until each is Established, and return the CRD objects as the API server has them. Other
    objects beside them (the bindings' admission policy) are applied as they are. The test
    applying them takes their fields over (--force-conflicts) from whoever applied them before in
    this session (`make crds-upgrade`'s field manager, in tests/helm)."""
    names: list[str] = []
    for path in files:
        manifest = path.read_text()
        for obj in _objects(manifest):
            if obj["kind"] == "CustomResourceDefinition":
                names.append(obj["metadata"]["name"])
        cluster.apply(manifest)

    def established(name: str) -> Any:
        crd = cluster.get_object("crd", name)
        # A CRD just created can show `conditions: null` for a moment.
        conditions = ((crd or {}).get("status") or {}).get("conditions") or []
        ready = any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
        return crd if ready else None

    return [
        waiting.wait_for(
            lambda n=n: established(n), f"CRD {n} Established", timeout=timeout, interval=0.2
        )
        for n in names
    ]


@pytest.fixture(scope="session")
def kube_crds(kube_cluster: KubeCluster) -> list[Any]:
    """The project's CRDs (crds/*.yaml) installed and Established; fails if there are none."""
    files = crd_files()
    if not files:
        pytest.fail(f"no CRD manifests in {REPO / 'crds'}", pytrace=False)
    return apply_crds(kube_cluster, files)
