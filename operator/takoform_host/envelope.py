"""The resource envelope of decision 0011: representation documents and plausible outputs.

Pure functions over JSON-shaped dicts; the store decides when they are called.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from takoform_spec.definitions import FieldSpec, FormDefinition
from takoform_spec.identity import FormRef


def timestamp(moment: float | None = None, *, precision: str = "milliseconds") -> str:
    when = datetime.now(UTC) if moment is None else datetime.fromtimestamp(moment, UTC)
    return when.isoformat(timespec=precision).replace("+00:00", "Z")


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()


def generate_outputs(
    definition: FormDefinition,
    space: str,
    name: str,
    uid: str,
    spec: dict[str, Any],
    previous: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Plausible outputs for every output the definition declares (stable per incarnation).

    Sensitive outputs are real secrets: random when the resource is created, then kept from
    `previous` (the outputs stored so far) on every update, until rotate_sensitive_outputs."""
    ref = definition.ref
    outputs = {
        out.name: _output_value(ref, out, space, name, uid, spec)
        for out in definition.outputs
        if not out.sensitive
    }
    kept = previous or {}
    for out in definition.sensitive_outputs:  # declaration order: a connection string last
        if isinstance(kept.get(out.name), str):
            outputs[out.name] = kept[out.name]
        else:
            _sensitive_value(ref, out.name, name, spec, outputs)
    return {out.name: outputs[out.name] for out in definition.outputs}


def rotate_sensitive_outputs(
    definition: FormDefinition, outputs: Mapping[str, Any], spec: dict[str, Any], name: str
) -> dict[str, Any]:
    """`outputs` with fresh values for every sensitive output (a credential rotation)."""
    sensitive = {out.name for out in definition.sensitive_outputs}
    fresh = {key: value for key, value in outputs.items() if key not in sensitive}
    for out in definition.sensitive_outputs:
        _sensitive_value(definition.ref, out.name, name, spec, fresh)
    return {out.name: fresh[out.name] for out in definition.outputs if out.name in fresh}


def _sensitive_value(
    ref: FormRef, output: str, name: str, spec: Mapping[str, Any], outputs: dict[str, Any]
) -> str:
    """A fresh secret; a connection string is built from the values generated before it (the
    definitions declare it last), so it always carries the current credentials."""
    lowered = output.lower()
    if lowered == "username":
        value = f"{name.replace('-', '_')[:40]}_admin"
    elif lowered == "connectionstring":
        host, port = outputs.get("host", f"{name}.takoform.example"), outputs.get("port", 443)
        if ref.kind == "RedisCache":
            scheme = "rediss" if spec.get("transitEncryption", True) else "redis"
            value = f"{scheme}://:{outputs.get('authToken', '')}@{host}:{port}"
        else:
            user, password = outputs.get("username", "admin"), outputs.get("password", "")
            value = f"postgresql://{user}:{password}@{host}:{port}/postgres?sslmode=require"
    elif lowered == "privatekey":
        value = _pem("PRIVATE KEY", secrets.token_bytes(48))
    elif lowered == "certificatechain":
        value = _pem("CERTIFICATE", secrets.token_bytes(96))
    else:  # password, authToken and any other secret
        value = secrets.token_urlsafe(24)
    outputs[output] = value
    return value


def _pem(label: str, body: bytes) -> str:
    """Random bytes in PEM armour: the shape of key material, not a usable key."""
    text = base64.b64encode(body).decode("ascii")
    lines = [text[i : i + 64] for i in range(0, len(text), 64)]
    return "\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----", ""])


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
