"""The three cluster-scoped CRDs of the tenancy model (docs/tenancy.md), for the generator.

`TakoformHost`: where a host is and which Secret (in the operator's namespace) holds its token.
`TakoformSpaceGrant`: which namespaces may address which spaces on one host. Both are written
by cluster admins only (the chart's `takoform-admin` ClusterRole); the operator only reads them
and writes the host's status.
`TakoformBinding`: which CR owns one host resource (core.binding), written by the operator and,
to release or pre-bind a resource, by cluster admins (`kubectl takoform release`); while Bound to
a CR it is protected by an admission policy shipped beside the CRDs (`binding_protection`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from takoform_operator.core import limits
from takoform_operator.core.binding import (
    BINDING_KIND,
    BINDING_PLURAL,
    FORCE_ANNOTATION,
    GUARDIAN_ANNOTATION,
    Phase,
)
from takoform_operator.core.state import DEFAULT_HOST
from takoform_operator.core.tenancy import (
    GRANT_KIND,
    GRANT_PLURAL,
    GROUP,
    HOST_KIND,
    HOST_PLURAL,
    TOO_BROAD,
    VERSION,
)
from takoform_operator.generate.crd import (
    DEFINITION_VERSION_PATTERN,
    conditions_schema,
    enum_schema,
    space_schema,
)
from takoform_operator.generate.documents import admission_policy, crd_document
from takoform_operator.generate.fields import key_rule

_STRING: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": limits.NAME_MAX_LENGTH}
#: A host URL; label keys (a 253-character prefix, "/", a 63-character name) and values.
_URL_MAX, _LABEL_KEY_MAX, _LABEL_VALUE_MAX = 2048, 317, 63
#: A grant's lists: its spaces (or patterns), named namespaces, selector terms and values.
_GRANT_MAX_ITEMS = 1024
#: Object names (DNS subdomains) and namespace names (DNS labels), as the API server checks them.
_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
#: The shapes takoform_spec.identity checks: a Form line's apiVersion and kind, a host resource
#: name, a FormRef's definition version and schema digest.
_API_VERSION = r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?/v[0-9]+((alpha|beta)[0-9]+)?$"
_KIND = r"^[A-Z][A-Za-z0-9]*$"
_RESOURCE_NAME = r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$"
_SCHEMA_DIGEST = r"^sha256:[0-9a-f]{64}$"
#: Length bounds: a group (253) + "/" + a version (63); a kind (a DNS label's 63); uids.
_API_VERSION_MAX, _KIND_MAX, _UID_MAX, _DEFINITION_VERSION_MAX = 317, 63, 128, 64


def _secret_key_ref(what: str, default_key: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": f"{what} Secret in the operator's own namespace, read by the operator "
        "only (namespace users cannot read it); used only when it is opted in for this host at "
        "its url (annotation takoform.io/host-credential-for: HOST=URL).",
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
    return conditions_schema(
        "Ready: the host answers and accepts the token (reasons Reachable, "
        "Unreachable, CertificateUntrusted, Unauthenticated, SecretNotFound, SecretNotOptedIn, "
        "SecretNotOptedInForUrl, InsecureUrl, InvalidHost).",
        {"type": "string", "maxLength": 316},
    )


def host_crd() -> dict[str, Any]:
    spec = {
        "type": "object",
        "required": ["url", "tokenSecretRef"],
        "x-kubernetes-validations": [
            {
                "rule": "self.url.startsWith('https://') || (has(self.insecure) && self.insecure)",
                "message": "url must be https; a plain http host needs insecure: true explicitly",
            }
        ],
        "properties": {
            "url": {
                "type": "string",
                "maxLength": _URL_MAX,
                "pattern": "^https?://[^\\s]+$",
                "description": "Base URL of the host API: https, or http with insecure: true.",
            },
            "insecure": {
                "type": "boolean",
                "default": False,
                "description": "Allow a plain http url: the token then travels in clear text "
                "(a host on a trusted network only). Without it the operator sends nothing to "
                "an http url.",
            },
            "tokenSecretRef": _secret_key_ref("The bearer token of the host:", "token"),
            "caBundleSecretRef": _secret_key_ref(
                "Optional CA bundle (PEM) to verify the host's TLS certificate:", "ca.crt"
            ),
            "clientCertSecretRef": {
                "type": "object",
                "description": "Optional client certificate: a kubernetes.io/tls Secret "
                "(tls.crt, tls.key) in the operator's namespace, opted in for this host like the "
                "token.",
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
            "apiVersion": {"type": "string", "maxLength": _API_VERSION_MAX},
            "kind": {"type": "string", "maxLength": _KIND_MAX},
            "definitionVersion": {"type": "string", "maxLength": _DEFINITION_VERSION_MAX},
            "schemaDigest": {"type": "string", "maxLength": limits.SCHEMA_DIGEST_MAX_LENGTH},
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
            "lastProbeTime": {
                "type": "string",
                "format": "date-time",
                "maxLength": limits.TIMESTAMP_MAX_LENGTH,
            },
            "forms": {
                "type": "array",
                "maxItems": limits.HOST_FORMS_MAX_ITEMS,
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
            "key": {**_STRING, "maxLength": _LABEL_KEY_MAX},
            "operator": enum_schema(["In", "NotIn", "Exists", "DoesNotExist"]),
            "values": {
                "type": "array",
                "maxItems": _GRANT_MAX_ITEMS,
                "items": {"type": "string", "maxLength": _LABEL_VALUE_MAX},
            },
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
                "maxItems": _GRANT_MAX_ITEMS,
                # A space written literally (core.tenancy.literal_space) takes up to three
                # characters for each of its own: `*` is `[*]`.
                "items": {
                    **_STRING,
                    "maxLength": 3 * limits.SPACE_MAX_LENGTH,
                    "pattern": "^[^/]+$",
                },
                "description": "Spaces: exact names or shell-style patterns (*, ?, [...]); "
                "case-sensitive. A space whose name holds *, ? or [ is written with that "
                "character in brackets ([*], [?], [[]) to match it alone.",
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
                    "names": {"type": "array", "maxItems": _GRANT_MAX_ITEMS, "items": _STRING},
                    "selector": {
                        "type": "object",
                        "properties": {
                            "matchLabels": {
                                "type": "object",
                                "maxProperties": _GRANT_MAX_ITEMS,
                                "x-kubernetes-validations": [key_rule(_LABEL_KEY_MAX, None)],
                                "additionalProperties": {
                                    "type": "string",
                                    "maxLength": _LABEL_VALUE_MAX,
                                },
                            },
                            "matchExpressions": {
                                "type": "array",
                                "maxItems": _GRANT_MAX_ITEMS,
                                "items": requirement,
                            },
                        },
                    },
                },
            },
        },
    }
    status = {
        "type": "object",
        "description": "Written by the operator: what it finds in the grant.",
        "properties": {
            "conditions": conditions_schema(
                f"{TOO_BROAD}: True (reason NoPositiveTerm) when spec.namespaces.selector has no "
                "positive term (a matchLabels pair, or an In or Exists expression), so that it "
                "matches every namespace without the labels it excludes, including namespaces "
                "created later.",
                {"type": "string", "maxLength": 316},
            ),
            "observedGeneration": {"type": "integer"},
        },
    }
    columns = [
        {"name": "Host", "type": "string", "jsonPath": ".spec.hostRef"},
        {"name": "Spaces", "type": "string", "jsonPath": ".spec.spaces"},
        {"name": "Namespaces", "type": "string", "jsonPath": ".spec.namespaces.names"},
        {
            "name": "Too broad",
            "type": "string",
            "jsonPath": f'.status.conditions[?(@.type=="{TOO_BROAD}")].status',
        },
    ]
    return _crd(
        GRANT_KIND,
        GRANT_PLURAL,
        "tkgrant",
        "Lets namespaces address spaces on one TakoformHost; without a grant nothing is sent "
        "(deny by default). Cluster admins only.",
        spec,
        status,
        columns,
    )


def _bounded(max_length: int, description: str, pattern: str | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": max_length}
    if pattern is not None:
        schema["pattern"] = pattern
    return {**schema, "description": description}


def _immutable(schema: dict[str, Any], field: str) -> dict[str, Any]:
    rule = {"rule": "self == oldSelf", "message": f"{field} is immutable"}
    return {
        **schema,
        "x-kubernetes-validations": [*schema.get("x-kubernetes-validations", []), rule],
    }


def _cr_ref(description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "required": ["namespace", "name"],
        "properties": {
            "namespace": _bounded(63, "Namespace of the CR.", _LABEL),
            "name": _bounded(253, "Name of the CR.", _SUBDOMAIN),
            "uid": _bounded(
                _UID_MAX,
                "metadata.uid of the CR; without it, whichever CR has that namespace and name.",
            ),
            "namespaceUid": _bounded(
                _UID_MAX,
                "metadata.uid of the namespace when the operator bound it: a namespace created "
                "again under the same name inherits nothing.",
            ),
        },
    }


def _form_ref() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "The exact FormRef the target was bound under (0017 rule 1).",
        "required": ["apiVersion", "kind", "definitionVersion", "schemaDigest"],
        "properties": {
            "apiVersion": _bounded(_API_VERSION_MAX, "Form apiVersion.", _API_VERSION),
            "kind": _bounded(_KIND_MAX, "Form kind.", _KIND),
            "definitionVersion": _definition_version(),
            "schemaDigest": _schema_digest(),
        },
    }


def _definition_version() -> dict[str, Any]:
    return _bounded(_DEFINITION_VERSION_MAX, "MAJOR.MINOR.PATCH.", DEFINITION_VERSION_PATTERN)


def _schema_digest() -> dict[str, Any]:
    return {
        "type": "string",
        "maxLength": 71,
        "pattern": _SCHEMA_DIGEST,
        "description": "sha256:<64 hex> of the definition schema.",
    }


def _requested() -> dict[str, Any]:
    """The owner's identity fields when it bound: the same document as a Form CR's
    status.requested (core.state.requested_to_json), with the same bounds as the CR's spec."""
    return {
        "type": "object",
        "description": "The identity fields of the owner's spec when it bound (its "
        "status.requested): the write-ahead record of the claim.",
        "required": ["space", "name"],
        "properties": {
            "space": space_schema("spec.space of the owner.", immutable=False),
            "name": _bounded(253, "The host resource name the owner asked for.", _RESOURCE_NAME),
            "pin": {
                "type": "object",
                "nullable": True,
                "description": "spec.formRef of the owner (null: unpinned).",
                "required": ["definitionVersion", "schemaDigest"],
                "properties": {
                    "definitionVersion": _definition_version(),
                    "schemaDigest": _schema_digest(),
                },
            },
            "importId": {
                "type": "string",
                "nullable": True,
                "maxLength": limits.IMPORT_ID_MAX_LENGTH,
                "description": "spec.importId of the owner (null: none); the bound of the CR's "
                "spec.importId.",
            },
            "hostRef": {
                "type": "string",
                "nullable": True,
                "maxLength": 253,
                "description": "spec.hostRef of the owner (null: the default host): a "
                "TakoformHost's name, which the owner could only bind through.",
            },
        },
    }


def binding_crd() -> dict[str, Any]:
    """TakoformBinding: one per host resource, the CR that owns it (core.binding). Everything is
    in spec, without a status subresource, so that one write conditioned on metadata.
    resourceVersion changes the whole of it at once. The identity fields are immutable: the
    object's name is their digest."""
    spec = {
        "type": "object",
        "required": ["space", "apiVersion", "kind", "resourceName"],
        "properties": {
            "host": _immutable(
                {
                    **_bounded(253, "The TakoformHost the resource lives on.", _SUBDOMAIN),
                    "default": DEFAULT_HOST,
                },
                "host",
            ),
            "space": space_schema(
                "Host space of the resource (opaque, case-sensitive; '/', control characters "
                "and the dot segments '.' and '..' are forbidden, as in a CR's spec.space). "
                "Immutable."
            ),
            "apiVersion": _immutable(
                _bounded(_API_VERSION_MAX, "apiVersion of the Form line.", _API_VERSION),
                "apiVersion",
            ),
            "kind": _immutable(_bounded(_KIND_MAX, "kind of the Form line.", _KIND), "kind"),
            "resourceName": _immutable(
                _bounded(253, "Host resource name.", _RESOURCE_NAME), "resourceName"
            ),
            "phase": enum_schema(
                Phase,
                default=str(Phase.BOUND),
                description="Bound: claimRef owns the resource (without a uid: only the CR of "
                "that namespace and name may bind it). Released: the owner let go "
                "(deletionPolicy Orphan). Lost: the owner went without releasing. Who may bind it "
                "next: docs/tenancy.md; deleting it (kubectl takoform release) unbinds the "
                "resource.",
            ),
            "claimRef": _cr_ref(
                "Bound: the owner CR (without uid: an admin's pre-binding to that namespace and "
                "name). Released/Lost: the only CR that may bind next, or absent."
            ),
            "lastOwner": _cr_ref("Released/Lost: the CR that held the resource last."),
            "formRef": _form_ref(),
            "requested": _requested(),
            "uid": _bounded(_UID_MAX, "The host incarnation (uid) the binding was last bound to."),
        },
    }
    columns: list[dict[str, Any]] = [
        {"name": "Phase", "type": "string", "jsonPath": ".spec.phase"},
        {"name": "Host", "type": "string", "jsonPath": ".spec.host"},
        {"name": "Space", "type": "string", "jsonPath": ".spec.space"},
        {"name": "Kind", "type": "string", "jsonPath": ".spec.kind"},
        {"name": "Resource", "type": "string", "jsonPath": ".spec.resourceName"},
        {"name": "Namespace", "type": "string", "jsonPath": ".spec.claimRef.namespace"},
        {"name": "Claim", "type": "string", "jsonPath": ".spec.claimRef.name"},
    ]
    wide = [
        {"name": "Last-Owner-Namespace", "type": "string", "jsonPath": ".spec.lastOwner.namespace"},
        {"name": "Last-Owner", "type": "string", "jsonPath": ".spec.lastOwner.name"},
        {"name": "UID", "type": "string", "jsonPath": ".spec.uid"},
    ]
    return _crd(
        BINDING_KIND,
        BINDING_PLURAL,
        "tkb",
        "Which CR owns one host resource (host, space, Form line, name), like a "
        "PersistentVolume's claimRef; the object name is a digest of that identity. Written by "
        "the operator; cluster admins release or pre-bind with kubectl takoform release.",
        spec,
        None,
        columns,
        wide,
    )


def _crd(
    kind: str,
    plural: str,
    short: str,
    description: str,
    spec: dict[str, Any],
    status: dict[str, Any] | None,
    columns: list[dict[str, Any]],
    wide: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """A cluster-scoped CRD of GROUP. kubectl shows `columns`, then Age; with -o wide also
    `wide`."""
    properties: dict[str, Any] = {
        "apiVersion": {"type": "string", "maxLength": _API_VERSION_MAX},
        "kind": {"type": "string", "maxLength": _KIND_MAX},
        "metadata": {"type": "object"},
        "spec": spec,
    }
    version: dict[str, Any] = {"name": VERSION, "served": True, "storage": True}
    if status is not None:
        properties["status"] = status
        version["subresources"] = {"status": {}}
    version["additionalPrinterColumns"] = [
        *columns,
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        *({**column, "priority": 1} for column in wide),
    ]
    version["schema"] = {
        "openAPIV3Schema": {
            "type": "object",
            "description": description,
            "required": ["spec"],
            "properties": properties,
        }
    }
    return crd_document(
        group=GROUP, scope="Cluster", kind=kind, plural=plural, short_name=short, versions=[version]
    )


#: The file beside the CRDs that protects Bound TakoformBindings (crds/ and the chart's crds/).
PROTECTION_FILE = "takoformbinding-protection.yaml"


def binding_protection() -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy (and its binding) that keeps a Bound TakoformBinding its
    owner's (brief section 9; like pv-protection): while a binding is Bound to a CR, only its
    guardian (the user the operator authenticates as, recorded when it bound it) may delete it
    or change anything but its annotations. An admin's explicit override is the force
    annotation (`kubectl takoform release --force`). Shipped with the CRDs, so that
    `make crds-upgrade` and a CRD-only install have it too. A binding without a guardian (an
    older release's, until the operator guards it at start) is not matched."""
    old = "oldObject"
    guardian = f"{old}.metadata.?annotations[?'{GUARDIAN_ANNOTATION}']"
    name = f"takoformbinding-protection.{GROUP}"
    owner = f"{old}.spec.claimRef.namespace + '/' + {old}.spec.claimRef.name"
    said = f"'TakoformBinding ' + {old}.metadata.name + ' is Bound to ' + {owner} + ': only the "
    remedy = (
        "; to let the resource go, delete that CR with deletionPolicy Orphan. To override it "
        "(another CR may then bind the resource while that CR still acts on it): kubectl "
        f"takoform release ' + {old}.metadata.name + ' --force'"
    )
    return admission_policy(
        name,
        {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [GROUP],
                        "apiVersions": ["*"],
                        "operations": ["UPDATE", "DELETE"],
                        "resources": [BINDING_PLURAL],
                    }
                ]
            },
            "matchConditions": [
                {
                    "name": "bound-to-a-cr",
                    "expression": f"has({old}.spec.phase) && {old}.spec.phase == "
                    f"'{Phase.BOUND}' && has({old}.spec.claimRef) && "
                    f"has({old}.spec.claimRef.uid) && {old}.spec.claimRef.uid != ''",
                },
                {"name": "guarded", "expression": f"{guardian}.hasValue()"},
                {
                    "name": "not-by-its-guardian",
                    "expression": f"{guardian}.orValue('') != request.userInfo.username",
                },
                {
                    "name": "not-forced",
                    "expression": f"!{old}.metadata.?annotations[?'{FORCE_ANNOTATION}'].hasValue()",
                },
            ],
            "validations": [
                {
                    "expression": "request.operation != 'DELETE'",
                    "messageExpression": said + "operator deletes it, once that CR let go" + remedy,
                    "reason": "Forbidden",
                },
                {
                    "expression": "request.operation == 'DELETE' || (object.spec == "
                    f"{old}.spec && object.metadata.?finalizers.orValue([]) == "
                    f"{old}.metadata.?finalizers.orValue([]) && "
                    f"object.metadata.?annotations[?'{GUARDIAN_ANNOTATION}'] == {guardian})",
                    "messageExpression": said
                    + "operator changes its spec, finalizers or guardian while that CR holds it"
                    + remedy,
                    "reason": "Forbidden",
                },
            ],
        },
    )
