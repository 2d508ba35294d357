"""Status writes the API server refuses, on demand: a ValidatingAdmissionPolicy and its binding
for one namespace, so a test can make the operator's writes fail exactly as trouble would."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from waiting import wait_until


@contextmanager
def refused_status_writes(
    cluster: Any,
    namespace: str,
    *,
    group: str,
    plural: str,
    expression: str,
    message: str,
    probe: dict[str, Any],
    probe_status: dict[str, Any],
) -> Iterator[str]:
    """Status writes to `plural` in `namespace` for which the CEL `expression` is false are
    refused with `message`. Yields the binding's name: deleting it lifts the refusal early.

    A policy takes a moment to be in force: the `probe` CR (one the operator sends nothing for)
    is created first, and a server-side dry run of `probe_status` on it must be refused before
    this returns."""
    name = f"refuse-{plural}-{namespace}"[:63]
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [group],
                        "apiVersions": ["v1"],
                        "operations": ["UPDATE"],
                        "resources": [f"{plural}/status"],
                    }
                ]
            },
            "validations": [{"expression": expression, "message": message}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            },
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(policy))
    cluster.kubectl("apply", "-f", "-", input=json.dumps(binding))
    try:
        _wait_in_force(cluster, namespace, plural, message, probe, probe_status)
        yield name
    finally:
        cluster.kubectl("delete", "validatingadmissionpolicybinding", name, check=False)
        cluster.kubectl("delete", "validatingadmissionpolicy", name, check=False)


def _wait_in_force(
    cluster: Any,
    namespace: str,
    plural: str,
    message: str,
    probe: dict[str, Any],
    probe_status: dict[str, Any],
) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(probe), namespace=namespace)
    name = probe["metadata"]["name"]
    patch = json.dumps({"status": probe_status})

    def refused() -> bool:
        answer = cluster.kubectl(
            "patch", plural, name, "--subresource=status", "--type=merge", "-p", patch,
            "--dry-run=server", namespace=namespace, check=False,
        )  # fmt: skip
        return bool(answer.returncode != 0 and message in answer.stderr)

    wait_until(refused, f"the admission policy refusing {plural} status writes", timeout=30)
    cluster.kubectl("delete", plural, name, "--wait=false", namespace=namespace)
