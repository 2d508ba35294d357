"""The resource envelope of decision 0011: representation documents and plausible outputs.

Pure functions over JSON-shaped dicts; the store decides when they are called.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

from takoform_spec.definitions import FieldSpec, FormDefinition
from takoform_spec.identity import FormRef

PORTABLE_REASONS = (
    "Available",
    "Provisioning",
    "Updating",
    "Deleting",
    "Failed",
    "DriftDetected",
    "Observed",
)


def timestamp(moment: float | None = None, *, precision: str = "milliseconds") -> str:
    when = datetime.now(UTC) if moment is None else datetime.fromtimestamp(moment, UTC)
    return when.isoformat(timespec=precision).replace("+00:00", "Z")


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()


def generate_outputs(
    definition: FormDefinition, space: str, name: str, uid: str, spec: dict[str, Any]
) -> dict[str, Any]:
    """Plausible outputs for every output the definition declares (stable per incarnation)."""
    ref = definition.ref
    return {out.name: _output_value(ref, out, space, name, uid, spec) for out in definition.outputs}


_PORTS = {"PostgresInstance": 5432, "RedisCache": 6379}


def _output_value(
    ref: FormRef, out: FieldSpec, space: str, name: str, uid: str, spec: dict[str, Any]
) -> Any:
    group = ref.api_version.split("/", 1)[0]
    short = group.split(".", 1)[0]
    kind = ref.kind.lower()
    token = _digest(space, ref.kind, name, uid)
    lowered = out.name.lower()
    if out.type == "array":
        if lowered == "nameservers":
            return [f"ns{i}.{token[:8]}.dns.takoform.example" for i in (1, 2)]
        return [f"{name}-{out.name}-{i}" for i in (1, 2)] if out.items == "string" else []
    if out.type == "map":
        return {"name": name} if out.values == "string" else {}
    if out.type == "boolean":
        return True
    if out.type in ("integer", "number"):
        if lowered == "port":
            return _PORTS.get(ref.kind, 443)
        if lowered == "iops" and isinstance(spec.get("sizeGiB"), int):
            return max(100, 3 * spec["sizeGiB"])
        return int(token[:4], 16)
    # strings
    if lowered in ("endpoint", "url"):
        return f"https://{name}.{short}.takoform.example"
    if lowered == "arn":
        return f"tko:{group}:{space}:{kind}/{name}"
    if lowered in ("host", "address", "dnsname", "bootstrapservers"):
        suffix = ":9092" if lowered == "bootstrapservers" else ""
        return f"{name}.{kind}.{short}.takoform.example{suffix}"
    if lowered == "fqdn":
        return f"{spec.get('recordName', name)}.{spec.get('zone', 'example')}"
    if lowered == "versioningstatus":
        return "Enabled" if spec.get("versioning") else "Disabled"
    if lowered == "notafter":
        days = spec.get("validityDays", 90)
        return timestamp(
            (datetime.now(UTC) + timedelta(days=days)).timestamp(), precision="seconds"
        )
    if lowered == "connectionsecretname" or lowered == "secretname":
        return f"{name}-{kind}-credentials"
    if lowered == "ipv6cidr":
        return f"fd{token[:2]}:{token[2:6]}:{token[6:10]}::/64" if spec.get("enableIpv6") else ""
    if lowered.endswith("id") or lowered == "serialnumber":
        return f"{kind}-{token[:16]}"
    return f"{name}-{out.name}"


def ready_condition(message: str, host_reason: str, moment: str) -> dict[str, Any]:
    return {
        "type": "Ready",
        "status": "True",
        "reason": "Available",
        "message": message,
        "hostReason": host_reason,
        "lastTransitionTime": moment,
    }


def new_representation(
    *,
    definition: FormDefinition,
    space: str,
    name: str,
    uid: str,
    spec: dict[str, Any],
    package_digest: str,
    creation_key: str | None,
) -> dict[str, Any]:
    now = timestamp()
    return {
        "formRef": definition.ref.to_json(),
        "metadata": {
            "space": space,
            "name": name,
            "uid": uid,
            "generation": "1",
            "revision": "1",
            "creationTimestamp": now,
            "packageDigest": package_digest,
            "creationIdempotencyKey": creation_key,
        },
        "spec": spec,
        "status": {
            "observedGeneration": "1",
            "observedTime": timestamp(precision="microseconds"),
            "conditions": [
                ready_condition(f"{definition.ref.kind} {name} is available", "Provisioned", now)
            ],
            "outputs": generate_outputs(definition, space, name, uid, spec),
        },
    }


def bump(decimal: str) -> str:
    return str(int(decimal) + 1)
