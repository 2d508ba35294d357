"""The generated CRDs' size bounds on the real API server (issue #20): the worst objects a
namespace user could write are refused (deep labels, a 10,000-character label value, 10,000
labels, a 1 MB string in any spec field of any line), and an object at the bounds is accepted.
The one bound no CRD schema can express, the keys of a Bucket's labels (their type differs
between definitions), is a ValidatingAdmissionPolicy shipped with the CRDs (crds/form-bounds.yaml,
applied with them); it ratchets, so an object stored before it can still lose its finalizer.
The largest Bucket the API server accepts under the bounds is printed (run with -s to see it).

Bodies go to the API server as raw bytes (`KubeCluster.create_raw`, what `kubectl create --raw`
sends), so nothing on the client side parses, prunes or refuses them first.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import yaml
from fixtures_kube import REPO, KubeCluster, wait_until

from takoform_operator.core import limits
from takoform_operator.generate.bounds import BOUNDS_POLICY_FILE
from takoform_spec.catalog import load_catalog

pytestmark = pytest.mark.kube

BOUNDS = load_catalog().bounds
MB = 1024 * 1024
#: A label key at the bounds: a 253-character DNS-subdomain prefix, "/", a 63-character name.
PREFIX = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])
LONGEST_KEY = f"{PREFIX}/{'n' * 63}"


def _post(
    kube: KubeCluster, crd: dict[str, Any], namespace: str | None, body: str | bytes
) -> tuple[bool, str]:
    """POST `body` as a CR of `crd` (in `namespace`, None: cluster-scoped): (accepted, the API
    server's answer)."""
    group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
    version = crd["spec"]["versions"][0]["name"]
    where = f"/namespaces/{namespace}" if namespace else ""
    url = f"/apis/{group}/{version}{where}/{plural}"
    return kube.create_raw(url, body.encode() if isinstance(body, str) else body)


def _crd(crds: list[Any], kind: str) -> dict[str, Any]:
    return next(c for c in crds if c["spec"]["names"]["kind"] == kind)  # type: ignore[no-any-return]


def _cr(crd: dict[str, Any], spec: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    group, version = crd["spec"]["group"], crd["spec"]["versions"][0]["name"]
    return {
        "apiVersion": f"{group}/{version}",
        "kind": crd["spec"]["names"]["kind"],
        "metadata": {"name": name or f"b-{uuid.uuid4().hex[:10]}"},
        "spec": spec,
    }


def _bucket(labels: Any) -> dict[str, Any]:
    return {
        "space": "team-a",
        "parameters": {"region": "eu-west-1", "sizeGiB": 1, "labels": labels},
    }


def _volume(labels: Any) -> dict[str, Any]:
    return {"space": "team-a", "parameters": {"zone": "eu-west-1a", "sizeGiB": 1, "labels": labels}}


def _deep(depth: int) -> str:
    """`{"l":{"l":...}}` nested `depth` levels, written as text (no encoder recursion)."""
    return '{"l":' * depth + '"x"' + "}" * depth


@pytest.mark.parametrize("kind", ["Bucket", "Volume"])
def test_deeply_nested_labels_are_refused(
    kube_cluster: KubeCluster, kube_crds: list[Any], kube_namespace: str, kind: str
) -> None:
    crd = _crd(kube_crds, kind)
    spec = _bucket("LABELS") if kind == "Bucket" else _volume("LABELS")
    body = json.dumps(_cr(crd, spec)).replace('"LABELS"', _deep(5000))
    accepted, answer = _post(kube_cluster, crd, kube_namespace, body)
    assert not accepted, answer
    assert "must be of type string" in answer, answer


@pytest.mark.parametrize(
    ("kind", "labels", "says"),
    [
        ("Bucket", {"team": "v" * 10_000}, "Too long"),
        ("Volume", {"team": "v" * 10_000}, "Too long"),
        ("Bucket", ["team=" + "v" * 10_000], "Too long"),
        ("Bucket", {f"k{n}": "v" for n in range(10_000)}, "Too many"),
        ("Volume", {f"k{n}": "v" for n in range(10_000)}, "Too many"),
        ("Bucket", [f"k{n}=v" for n in range(10_000)], "Too many"),
        ("Volume", {"k" * 10_000: "v"}, "labels keys are at most 317 characters"),
        ("Volume", {"-not-a-label-key": "v"}, "labels keys are at most 317 characters"),
        ("Bucket", "v" * 10_000, "Too long"),
    ],
    ids=[
        "bucket-long-value",
        "volume-long-value",
        "bucket-long-item",
        "bucket-10000-labels",
        "volume-10000-labels",
        "bucket-10000-items",
        "volume-long-key",
        "volume-bad-key",
        "bucket-long-scalar",
    ],
)
def test_labels_beyond_the_kubernetes_label_limits_are_refused(
    kube_cluster: KubeCluster,
    kube_crds: list[Any],
    kube_namespace: str,
    kind: str,
    labels: Any,
    says: str,
) -> None:
    crd = _crd(kube_crds, kind)
    spec = _bucket(labels) if kind == "Bucket" else _volume(labels)
    accepted, answer = _post(kube_cluster, crd, kube_namespace, json.dumps(_cr(crd, spec)))
    assert not accepted, answer[:2000]
    assert says in answer, answer[:2000]


def _sized_fields(
    schema: dict[str, Any], path: tuple[str, ...]
) -> list[tuple[tuple[str, ...], Any]]:
    """(path, a value holding a 1 MB string) for every string, list and map of a spec."""
    huge = "x" * MB
    found: list[tuple[tuple[str, ...], Any]] = []
    for name, child in schema.get("properties", {}).items():
        where = (*path, name)
        kind = child.get("type")
        if kind == "string" or kind is None:
            found.append((where, huge))
        elif kind == "array" and child["items"].get("type") == "string":
            found.append((where, [huge]))
        elif kind == "object" and "additionalProperties" in child:
            if child["additionalProperties"].get("type") == "string":
                found.append((where, {"k": huge}))
        elif kind == "object":
            found += _sized_fields(child, where)
    return found


def _set(document: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        document = document.setdefault(key, {})
    document[path[-1]] = value


def test_a_1mb_string_in_any_spec_field_of_any_crd_is_refused(
    kube_cluster: KubeCluster, kube_crds: list[Any], kube_namespace: str
) -> None:
    tried = 0
    for crd in kube_crds:
        namespaced = crd["spec"]["scope"] == "Namespaced"
        spec_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        for path, value in _sized_fields(spec_schema, ()):
            body = _cr(crd, {})
            _set(body["spec"], path, value)
            namespace = kube_namespace if namespaced else None
            accepted, answer = _post(kube_cluster, crd, namespace, json.dumps(body))
            where = f"{crd['spec']['names']['kind']} spec.{'.'.join(path)}"
            assert not accepted, f"{where} accepted a 1 MB string"
            assert "Too long" in answer or "at most" in answer, f"{where}: {answer[:1000]}"
            tried += 1
    assert tried > 60, tried


def _largest_bucket(labels: Any) -> dict[str, Any]:
    return {
        "space": "s" * limits.SPACE_MAX_LENGTH,
        "hostRef": "h" * limits.NAME_MAX_LENGTH,
        "resourceName": "r" * limits.NAME_MAX_LENGTH,
        "importId": "i" * limits.IMPORT_ID_MAX_LENGTH,
        "deletionPolicy": "Orphan",
        "managementPolicy": "Observe",
        "formRef": {"definitionVersion": "1.0.0", "schemaDigest": "sha256:" + "0" * 64},
        "parameters": {
            "region": "eu-" + "w" * (BOUNDS.string_max_length - 5) + "-1",
            "quota": "1" * (BOUNDS.string_max_length - 2) + "Gi",
            "sizeGiB": 1048576,
            "public": True,
            "versioning": True,
            "lifecycleDays": 2**62,
            "access": "public-read",
            "labels": labels,
        },
    }


def test_a_bucket_at_the_bounds_is_accepted_and_its_size_is_measured(
    kube_cluster: KubeCluster, kube_crds: list[Any], kube_namespace: str
) -> None:
    crd = _crd(kube_crds, "Bucket")
    convention = BOUNDS.conventions["labels"]
    assert convention.map is not None and convention.list is not None
    as_map = {
        f"{PREFIX}/{n:02d}{'n' * 61}": "v" * convention.map.value_max_length
        for n in range(convention.map.max_properties)
    }
    assert all(len(key) == convention.map.key_max_length for key in as_map)
    as_list = [f"{n:02d}" + "x" * 379 for n in range(convention.list.max_items)]
    sizes = {}
    for shape, labels in (("map", as_map), ("list", as_list)):
        name = f"largest-{shape}"
        body = json.dumps(_cr(crd, _largest_bucket(labels), name))
        accepted, answer = _post(kube_cluster, crd, kube_namespace, body)
        assert accepted, answer[:3000]
        stored = kube_cluster.kubectl(
            "get", f"buckets.storage.takoform.io/{name}", "-o", "json", namespace=kube_namespace
        ).stdout
        assert json.loads(stored)["spec"]["parameters"]["labels"] == labels
        sizes[shape] = (len(body.encode()), len(stored.encode()))
    # One step past the bounds is refused: a 65th label, a 64-character value.
    over = {**as_map, "one-more": "v"}
    accepted, answer = _post(
        kube_cluster, crd, kube_namespace, json.dumps(_cr(crd, _largest_bucket(over)))
    )
    assert not accepted and "Too many" in answer, answer[:2000]
    print(
        "\nlargest Bucket the API server accepts under the bounds (spec at every bound, "
        "metadata minimal): "
        + "; ".join(
            f"labels as a {shape}: {sent:,} bytes sent, {stored:,} bytes as stored"
            for shape, (sent, stored) in sizes.items()
        )
    )
    # Far below etcd's 1.5 MB: a hundred of them are a few MB in the operator's cache.
    assert max(stored for _, stored in sizes.values()) < 64 * 1024


def test_a_bucket_label_key_beyond_the_label_limits_is_refused_by_the_bounds_policy(
    kube_cluster: KubeCluster, kube_crds: list[Any], kube_namespace: str
) -> None:
    crd = _crd(kube_crds, "Bucket")
    long_key = _cr(crd, _bucket({"k" * 10_000: "v"}))
    message = "Bucket spec.parameters.labels keys are at most 317 characters"

    # The policy takes effect within moments of being created: await the first refusal.
    def refused() -> bool:
        accepted, answer = _post(kube_cluster, crd, kube_namespace, json.dumps(long_key))
        if accepted:
            kube_cluster.kubectl(
                "delete", "buckets.storage.takoform.io", long_key["metadata"]["name"],
                namespace=kube_namespace,
            )  # fmt: skip
        return not accepted and message in answer

    wait_until(refused, "the bounds policy refusing a 10,000-character label key")
    for labels in ({"-bad": "v"}, {LONGEST_KEY + "x": "v"}):
        accepted, answer = _post(
            kube_cluster, crd, kube_namespace, json.dumps(_cr(crd, _bucket(labels)))
        )
        assert not accepted and message in answer, answer[:2000]
    # At the bounds, and in the list shape of definition 2.0.0, still accepted.
    for labels in ({LONGEST_KEY: "v" * 63}, ["team=data"]):
        accepted, answer = _post(
            kube_cluster, crd, kube_namespace, json.dumps(_cr(crd, _bucket(labels)))
        )
        assert accepted, answer[:2000]


def _policy_binding() -> dict[str, Any]:
    docs = list(yaml.safe_load_all((REPO / "crds" / BOUNDS_POLICY_FILE).read_text()))
    binding: dict[str, Any] = next(
        d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"
    )
    return binding


def test_a_bucket_stored_before_the_bounds_policy_can_still_be_finalized_and_deleted(
    kube_cluster: KubeCluster, kube_crds: list[Any], kube_namespace: str
) -> None:
    """The policy ratchets: an update that leaves the label set as stored passes, so a Bucket
    stored with a bad label key before the policy existed loses its finalizer and goes; a new
    bad key, in it or in any other Bucket, is still refused."""
    crd = _crd(kube_crds, "Bucket")
    binding = _policy_binding()
    name = binding["metadata"]["name"]
    bad = _cr(crd, _bucket({"-bad": "v"}))
    bad["metadata"]["finalizers"] = ["takoform.io/test-hold"]
    message = "Bucket spec.parameters.labels keys are at most 317 characters"
    kube_cluster.kubectl("delete", "validatingadmissionpolicybinding", name)
    try:
        # Without its binding the policy stops within moments: the Bucket is stored as it is.
        def stored() -> bool:
            accepted, answer = _post(kube_cluster, crd, kube_namespace, json.dumps(bad))
            return accepted or "already exists" in answer

        wait_until(stored, "a Bucket with a bad label key stored without the policy")
    finally:
        kube_cluster.apply(yaml.safe_dump(binding))
    plural = "buckets.storage.takoform.io"
    cr = bad["metadata"]["name"]

    def patch(body: dict[str, Any]) -> Any:
        return kube_cluster.kubectl(
            "patch", plural, cr, "--type=merge", "-p", json.dumps(body),
            namespace=kube_namespace, check=False,
        )  # fmt: skip

    # The policy is back once a new Bucket with a bad key is refused again.
    def refused() -> bool:
        probe = _cr(crd, _bucket({"-b": "v"}))
        accepted, answer = _post(kube_cluster, crd, kube_namespace, json.dumps(probe))
        if accepted:
            kube_cluster.kubectl(
                "delete", plural, probe["metadata"]["name"], namespace=kube_namespace
            )
        return not accepted and message in answer

    wait_until(refused, "the bounds policy refusing a bad label key again")
    # A new bad key in the stored Bucket is refused; its labels stay as stored.
    answer = patch({"spec": {"parameters": {"labels": {"-worse": "v"}}}})
    assert answer.returncode != 0 and message in answer.stderr, answer.stderr
    stored_labels = kube_cluster.get_object(plural, cr, kube_namespace)["spec"]["parameters"]
    assert stored_labels["labels"] == {"-bad": "v"}
    # Unchanged labels: the deletion goes through, finalizer and all.
    kube_cluster.kubectl("delete", plural, cr, "--wait=false", namespace=kube_namespace)
    removed = patch({"metadata": {"finalizers": None}})
    assert removed.returncode == 0, removed.stderr
    wait_until(
        lambda: kube_cluster.get_object(plural, cr, kube_namespace) is None,
        "the Bucket stored before the policy gone",
    )
