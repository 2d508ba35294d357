"""Connection Secrets: which sensitive outputs of a settled resource go to which Secret.

Pure decisions over values the reconcile already has: the Secret's name, its content and when
it may be written (a representation read under the exact recorded FormRef and uid of a bound
state with nothing pending). The kube adapter (kube/connection_secrets.py) does the writing.
Sensitive values never enter the State, hence never the status (core.codecs.decode_outputs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from takoform_spec.identity import FormLine

from .registry import Registry
from .state import ResourceView, State

#: The Secret's name when spec.writeConnectionSecretToRef is absent: `<metadata.name>` + this.
DEFAULT_SUFFIX = "-connection"
#: Labels naming the CR a connection Secret belongs to (its ownerReference says it too).
OWNER_GROUP_LABEL = "takoform.io/owner-group"
OWNER_KIND_LABEL = "takoform.io/owner-kind"
OWNER_NAME_LABEL = "takoform.io/owner-name"
MANAGED_BY = ("app.kubernetes.io/managed-by", "takoform-operator")
_LABEL_VALUE_LIMIT = 63


def has_connection_secret(registry: Registry, line: FormLine) -> bool:
    """Whether any definition of `line` this build knows declares a sensitive output."""
    return any(
        spec.sensitive
        for ref in registry.known_refs(line)
        for spec in registry.codec_for(ref).outputs_for(ref)
    )


def secret_name(cr_name: str, ref_name: str | None) -> str:
    """spec.writeConnectionSecretToRef.name, or the documented default."""
    return ref_name or f"{cr_name}{DEFAULT_SUFFIX}"


@dataclass(frozen=True)
class ConnectionSecret:
    """The Secret one CR's sensitive outputs go to. `data` is secret: never log or show it."""

    namespace: str
    name: str
    data: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), repr=False)

    def __repr__(self) -> str:
        return f"ConnectionSecret({self.namespace}/{self.name}, keys={sorted(self.data)})"


def connection_secret(
    registry: Registry,
    state: State,
    resource: ResourceView | None,
    *,
    namespace: str,
    name: str,
) -> ConnectionSecret | None:
    """The Secret to write after a reconcile, or None when nothing may be written: only a
    representation served under the exact FormRef and uid the state is bound to, with no
    operation pending, is the truth about the current credentials."""
    if resource is None or not state.bound or state.pending is not None:
        return None
    if resource.form_ref != state.form_ref or resource.uid != state.uid:
        return None
    codec = registry.codec_for(resource.form_ref)
    data = codec.decode_sensitive_outputs(resource.form_ref, resource.outputs)
    if not data:
        return None
    return ConnectionSecret(namespace, name, MappingProxyType(data))


def owner_labels(api_version: str, kind: str, cr_name: str) -> dict[str, str]:
    """Labels naming the owning CR (the name only when it fits a label value)."""
    labels = {
        MANAGED_BY[0]: MANAGED_BY[1],
        OWNER_GROUP_LABEL: api_version.split("/", 1)[0],
        OWNER_KIND_LABEL: kind,
    }
    if len(cr_name) <= _LABEL_VALUE_LIMIT:
        labels[OWNER_NAME_LABEL] = cr_name
    return labels


def redact(text: str, secrets: Mapping[str, Any]) -> str:
    """`text` with every secret value replaced: for messages built from answers that might
    echo what was sent (an API server error about a Secret)."""
    for value in sorted({str(v) for v in secrets.values() if str(v)}, key=len, reverse=True):
        text = text.replace(value, "<redacted>")
    return text
