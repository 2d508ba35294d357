"""The two cluster-scoped CRDs of the tenancy model (docs/tenancy.md), for the generator.

`TakoformHost`: where a host is and which Secret (in the operator's namespace) holds its token.
`TakoformSpaceGrant`: which namespaces may address which spaces on one host. Both are written
by cluster admins only (the chart's `takoform-admin` ClusterRole); the operator only reads them
and writes the host's status.
"""

from __future__ import annotations

from typing import Any

from takoform_operator.core.tenancy import (
    GRANT_KIND,
    GRANT_PLURAL,
    GROUP,
    HOST_KIND,
    HOST_PLURAL,
    VERSION,
)

_STRING: dict[str, Any] = {"type": "string", "minLength": 1}


def _secret_key_ref(what: str, default_key: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": f"{what} Secret in the operator's own namespace, read by the operator "
        "only (namespace users cannot read it).",
        "required": ["name"],
        "properties": {
            "name": {**_STRING, "description": "Secret name."},
            "key": {
                **_STRING,
                "default": default_key,
                "description": f"Key in the Secret (default {default_key}).",
            },
        },
    }


def _conditions() -> dict[str, Any]:
    return {
        "type": "array",
        "description": "Ready: the host answers and accepts the token (reasons Reachable, "
        "Unreachable, CertificateUntrusted, Unauthenticated, SecretNotFound, InvalidHost).",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["type", "status"],
            "properties": {
                "type": {"type": "string"},
                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                "reason": {"type": "string"},
                "message": {"type": "string"},
                "lastTransitionTime": {"type": "string", "format": "date-time"},
                "observedGeneration": {"type": "integer"},
            },
        },
    }


def host_crd() -> dict[str, Any]:
    spec = {
        "type": "object",
        "required": ["url", "tokenSecretRef"],
        "properties": {
            "url": {
                "type": "string",
                "pattern": "^https?://[^\\s]+$",
                "description": "Base URL of the host API (http or https).",
            },
            "tokenSecretRef": _secret_key_ref("The bearer token of the host:", "token"),
            "caBundleSecretRef": _secret_key_ref(
                "Optional CA bundle (PEM) to verify the host's TLS certificate:", "ca.crt"
            ),
            "clientCertSecretRef": {
                "type": "object",
                "description": "Optional client certificate: a kubernetes.io/tls Secret "
                "(tls.crt, tls.key) in the operator's namespace.",
                "required": ["name"],
                "properties": {"name": {**_STRING, "description": "Secret name."}},
            },
            "timeoutSeconds": {
                "type": "number",
                "minimum": 0.1,
                "maximum": 600,
                "default": 10,
                "description": "Per-request timeout in seconds.",
            },
            "default": {
                "type": "boolean",
                "default": False,
                "description": "CRs without spec.hostRef use this host. At most one host may be "
                "default; with two, none is and such CRs are Blocked (HostNotFound).",
            },
        },
    }
    form = {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "definitionVersion": {"type": "string"},
            "schemaDigest": {"type": "string"},
            "served": {"type": "boolean", "description": "The host serves this FormRef."},
            "supported": {"type": "boolean", "description": "This operator build decodes it."},
        },
    }
    status = {
        "type": "object",
        "description": "Written by the operator, refreshed periodically. Never holds the token.",
        "properties": {
            "conditions": _conditions(),
            "observedGeneration": {"type": "integer"},
            "lastProbeTime": {"type": "string", "format": "date-time"},
            "forms": {
                "type": "array",
                "description": "Every FormRef the host serves or this build supports, flagged.",
                "items": form,
            },
        },
    }
    ready = '.status.conditions[?(@.type=="Ready")]'
    columns = [
        {"name": "URL", "type": "string", "jsonPath": ".spec.url"},
        {"name": "Default", "type": "boolean", "jsonPath": ".spec.default"},
        {"name": "Ready", "type": "string", "jsonPath": ready + ".status"},
        {"name": "Reason", "type": "string", "jsonPath": ready + ".reason"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    return _crd(
        HOST_KIND,
        HOST_PLURAL,
        "tkhost",
        "A Takoform host the operator manages resources on; its token stays in a Secret of the "
        "operator's namespace. Cluster admins only.",
        spec,
        status,
        columns,
    )


def grant_crd() -> dict[str, Any]:
    requirement = {
        "type": "object",
        "required": ["key", "operator"],
        "properties": {
            "key": _STRING,
            "operator": {"type": "string", "enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
            "values": {"type": "array", "items": {"type": "string"}},
        },
    }
    spec = {
        "type": "object",
        "required": ["hostRef", "spaces", "namespaces"],
        "properties": {
            "hostRef": {**_STRING, "description": "Name of the TakoformHost the spaces are on."},
            "spaces": {
                "type": "array",
                "minItems": 1,
                "items": {**_STRING, "pattern": "^[^/]+$"},
                "description": "Spaces: exact names or shell-style patterns (*, ?, [...]); "
                "case-sensitive.",
            },
            "namespaces": {
                "type": "object",
                "description": "Namespaces that may address those spaces: by name, by label "
                "selector, or both (either matching is enough). An empty selector matches no "
                "namespace.",
                "x-kubernetes-validations": [
                    {
                        "rule": "has(self.names) || has(self.selector)",
                        "message": "name namespaces, or select them by label",
                    }
                ],
                "properties": {
                    "names": {"type": "array", "items": _STRING},
                    "selector": {
                        "type": "object",
                        "properties": {
                            "matchLabels": {
                                "type": "object",
                                "additionalProperties": {"type": "string"},
                            },
                            "matchExpressions": {"type": "array", "items": requirement},
                        },
                    },
                },
            },
        },
    }
    columns = [
        {"name": "Host", "type": "string", "jsonPath": ".spec.hostRef"},
        {"name": "Spaces", "type": "string", "jsonPath": ".spec.spaces"},
        {"name": "Namespaces", "type": "string", "jsonPath": ".spec.namespaces.names"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    return _crd(
        GRANT_KIND,
        GRANT_PLURAL,
        "tkgrant",
        "Lets namespaces address spaces on one TakoformHost; without a grant nothing is sent "
        "(deny by default). Cluster admins only.",
        spec,
        None,
        columns,
    )


def _crd(
    kind: str,
    plural: str,
    short: str,
    description: str,
    spec: dict[str, Any],
    status: dict[str, Any] | None,
    columns: list[dict[str, Any]],
) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": spec,
    }
    version: dict[str, Any] = {"name": VERSION, "served": True, "storage": True}
    if status is not None:
        properties["status"] = status
        version["subresources"] = {"status": {}}
    version["additionalPrinterColumns"] = columns
    version["schema"] = {
        "openAPIV3Schema": {
            "type": "object",
            "description": description,
            "required": ["spec"],
            "properties": properties,
        }
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "takoform-operator"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": [short],
            },
            "versions": [version],
        },
    }
