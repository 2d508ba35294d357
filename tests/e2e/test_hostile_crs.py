"""Hostile CRs next to ordinary ones, on the real API server with the real operator process and
the reference host (issue: a poisoned object stays one object's problem).

Hypothesis makes Buckets whose fields hold what their schema admits but no Form means: values
nested deep (up to the deepest the API server serves back), wide maps, long strings, any unicode
and control characters, wrong types in the free-form `labels`, huge and odd numbers, odd names,
import ids and host references. Each example applies a batch of them and one ordinary Bucket,
then checks: the API server refused a hostile CR or it ends with a condition, the ordinary one
becomes Ready, the operator is alive, its log has no traceback, and its resident memory stays
under the chart's memory limit.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures_kube import REPO, KubeCluster, wait_until
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from manifests import bucket
from operator_process import Operator, is_ready
from waiting import wait_for

pytestmark = [pytest.mark.kube, pytest.mark.host]

#: The deepest free-form value the API server both stores and serves back (test_poisoned.py).
DEEPEST_SERVED = 9992
#: Buckets per example, and examples: about a minute and a half in all.
BATCH = 6
EXAMPLES = 8
_names = itertools.count()


def _memory_limit() -> int:
    values = yaml.safe_load((REPO / "charts/takoform-operator/values.yaml").read_text())
    limit = str(values["resources"]["limits"]["memory"])
    number, unit = re.fullmatch(r"(\d+)(Ki|Mi|Gi)", limit).groups()  # type: ignore[union-attr]
    return int(number) * {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}[unit]


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _nested(depth: int, lists: bool) -> str:
    if lists:
        return "[" * depth + "]" * depth
    return '{"k":' * depth + "1" + "}" * depth


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=50),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=20), children, max_size=5)
    ),
    max_leaves=20,
)
#: Text of every kind, control characters and non-BMP characters included (the API server
#: turns what is not valid UTF-8 into U+FFFD).
odd_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=300)
huge_numbers = st.sampled_from(
    [
        "9223372036854775807",
        "-9223372036854775808",
        "18446744073709551616",
        "1e308",
        "-1.7976931348623157e308",
        "1e400",
        "5e-324",
        "0",
        "-0",
        "1.5",
        "1" * 30,
    ]
)
#: (field of spec.parameters or spec, raw JSON text of its value)
labels = st.one_of(
    st.tuples(st.integers(65, DEEPEST_SERVED), st.booleans()).map(lambda t: _nested(*t)),
    # Up to past what etcd takes: about 1.5 MiB in one string (1,566,406 characters passed,
    # 1,576,171 were refused), 50,000 keys in one map.
    st.integers(100, 50_000).map(lambda n: json.dumps({f"key-{i}": "v" for i in range(n)})),
    st.integers(10_000, 1_600_000).map(lambda n: json.dumps({"long": "x" * n})),
    st.dictionaries(odd_text, odd_text, max_size=5).map(json.dumps),
    json_values.map(json.dumps),
    huge_numbers,
)
hostile_field = st.one_of(
    st.tuples(st.just("labels"), labels),
    st.tuples(st.sampled_from(["lifecycleDays", "sizeGiB"]), huge_numbers),
    st.tuples(
        st.sampled_from(["resourceName", "importId", "hostRef"]),
        st.one_of(odd_text, st.integers(1000, 200_000).map(lambda n: "n" * n)).map(json.dumps),
    ),
)


def hostile_bucket(name: str, field: str, raw: str) -> str:
    """A Bucket (JSON text) whose `field` is the raw JSON text `raw` (spliced in as text: it may
    be deeper than Python's json can write)."""
    doc = json.loads(bucket(name, 5))
    doc["spec"]["parameters"]["versioning"] = True
    where = "parameters" if field in ("labels", "lifecycleDays", "sizeGiB") else "spec"
    target = doc["spec"]["parameters"] if where == "parameters" else doc["spec"]
    target[field] = "@@HOSTILE@@"
    return json.dumps(doc).replace('"@@HOSTILE@@"', raw)


def _conditions(cluster: KubeCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    found = cluster.kubectl(
        "get", "bucket", name, "-o", "jsonpath={.status.conditions}", namespace=namespace,
        check=False,
    )  # fmt: skip
    return list(json.loads(found.stdout or "[]")) if found.returncode == 0 else []


@settings(
    max_examples=EXAMPLES,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(hostile_field, min_size=BATCH, max_size=BATCH))
def test_hostile_crs_stay_their_own_problem(
    operator: tuple[Operator, Any, str],
    kube_cluster: KubeCluster,
    fields: list[tuple[str, str]],
) -> None:
    running, _host, namespace = operator
    accepted: list[tuple[str, str]] = []
    for field, raw in fields:
        name = f"hostile-{next(_names)}"
        url = f"/apis/storage.takoform.io/v1/namespaces/{namespace}/buckets"
        created, _ = kube_cluster.create_raw(url, hostile_bucket(name, field, raw).encode())
        if created:
            accepted.append((name, field))
    ordinary = f"ordinary-{next(_names)}"
    kube_cluster.apply(bucket(ordinary, 3), namespace=namespace)

    wait_until(lambda: is_ready(kube_cluster, namespace, ordinary), f"{ordinary} Ready", 60)
    seen = []
    for name, field in accepted:
        conditions = wait_for(
            lambda name=name: _conditions(kube_cluster, namespace, name),
            f"a condition on {name}",
            timeout=60,
        )
        true = sorted(f"{c['type']}/{c['reason']}" for c in conditions if c["status"] == "True")
        seen.append(f"{field}: {','.join(true) or 'none True'}")
    assert running.process.poll() is None, running.log_tail()
    log = running.log.read_text(errors="replace")
    assert "Traceback" not in log, log[log.index("Traceback") - 2000 :][:6000]
    rss, limit = _rss(running.process.pid), _memory_limit()
    assert rss < limit, f"RSS {rss >> 20} MiB over the chart's limit {limit >> 20} MiB"
    print(f"accepted {len(accepted)}/{len(fields)}; RSS {rss >> 20} MiB; {'; '.join(seen)}")
