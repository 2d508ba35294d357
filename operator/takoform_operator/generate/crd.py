"""The generator's CRDs: one CustomResourceDefinition per Form line, from its definitions.

`render_crd` takes the schema of the line's desired fields (generate.fields), adds the identity
fields, their transition rules and the status the operator writes, which core.limits bounds
(issue #20; generate.bounds checks that no node is left unbounded). Also the schema pieces the
tenancy CRDs (generate.tenancy) share with it: strings, enums, spaces, conditions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from takoform_operator.core import limits
from takoform_operator.core.conditions import ConditionType, Reason
from takoform_operator.core.policy import PAUSED_ANNOTATION
from takoform_operator.core.registry import Registry
from takoform_operator.core.state import ManagementPolicy
from takoform_operator.generate.bounds import check_bounded
from takoform_operator.generate.documents import crd_document, crd_text
from takoform_operator.generate.fields import field_schema, key_rule, merged_fields, typed_schema
from takoform_spec.bounds import Bounds
from takoform_spec.definitions import FieldSpec, FormDefinition
from takoform_spec.identity import FormLine, plural_of

CATEGORY = "takoform"


# -- naming ------------------------------------------------------------------------------------


def crd_name(line: FormLine) -> str:
    return f"{plural_of(line.kind)}.{line.group}"


def short_name(line: FormLine) -> str:
    return "tk" + line.kind.lower()


def crd_file(line: FormLine) -> str:
    return f"{crd_name(line)}.yaml"


def doc_file(line: FormLine) -> str:
    """The line's page under docs/forms (its CRD's descriptions point there)."""
    return f"{line.group}-{line.kind.lower()}.md"


# -- schema pieces (the tenancy CRDs' too) ------------------------------------------------------


def _string(max_length: int, description: str | None = None, **extra: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", "maxLength": max_length, **extra}
    if description is not None:
        schema["description"] = description
    return schema


def enum_schema(values: Iterable[str], **extra: Any) -> dict[str, Any]:
    """A string that is one of `values` (a StrEnum's members: their values)."""
    names = [str(value) for value in values]
    return {"type": "string", "enum": names, "maxLength": max(map(len, names)), **extra}


def _form_ref_status_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "The exact Form identity the host resource is bound to (0017 rule 1).",
        "properties": {
            "apiVersion": _string(limits.API_VERSION_MAX_LENGTH, "Form apiVersion."),
            "kind": _string(limits.KIND_MAX_LENGTH, "Form kind."),
            "definitionVersion": _string(
                limits.DEFINITION_VERSION_MAX_LENGTH, "Definition version."
            ),
            "schemaDigest": _string(
                limits.SCHEMA_DIGEST_MAX_LENGTH, "sha256 of the definition schema."
            ),
        },
    }


#: The CRD pattern of a definition version (takoform_spec.identity checks the same shape).
DEFINITION_VERSION_PATTERN = r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$"


def space_schema(description: str, *, immutable: bool = True) -> dict[str, Any]:
    """A SpaceID (takoform_spec.identity.validate_space_id): the Form CRDs' spec.space and every
    space a TakoformBinding records, so that a binding accepts every space a CR does."""
    rules = [{"rule": "self != '.' && self != '..'", "message": "space must not be '.' or '..'"}]
    if immutable:
        rules.insert(0, {"rule": "self == oldSelf", "message": "space is immutable"})
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": limits.SPACE_MAX_LENGTH,
        "pattern": "^[^/\\x00-\\x1f\\x7f-\\x9f]+$",
        "description": description,
        "x-kubernetes-validations": rules,
    }


def _unchanged_rule(field: str) -> dict[str, str]:
    return {
        "rule": f"has(self.{field}) == has(oldSelf.{field}) && "
        f"(!has(self.{field}) || self.{field} == oldSelf.{field})",
        "message": f"{field} is immutable: it cannot be added, changed or removed",
    }


def _status_schema() -> dict[str, Any]:
    name, uid = limits.NAME_MAX_LENGTH, limits.UID_MAX_LENGTH
    counter = limits.COUNTER_MAX_LENGTH
    remedy = limits.REMEDY_TEXT_MAX_LENGTH
    return {
        "type": "object",
        "description": "The operator's state for this resource, written so a crash at any instant "
        "leaves a state the next reconcile can finish from.",
        "properties": {
            "formRef": _form_ref_status_schema(),
            "packageDigest": _string(
                limits.PACKAGE_DIGEST_MAX_LENGTH,
                "Package the definition came from at creation; audit evidence only.",
            ),
            "host": _string(name, "TakoformHost the resource lives on."),
            "space": _string(limits.SPACE_MAX_LENGTH, "Host space the resource lives in."),
            "name": _string(name, "Host resource name."),
            "requested": {
                "type": "object",
                "description": "The identity fields of the spec when the target was recorded, "
                "before anything was sent; a spec that asks for others is Blocked.",
                "properties": {
                    "space": _string(limits.SPACE_MAX_LENGTH),
                    "name": _string(name),
                    "pin": {
                        "type": "object",
                        "nullable": True,
                        "properties": {
                            "definitionVersion": _string(limits.DEFINITION_VERSION_MAX_LENGTH),
                            "schemaDigest": _string(limits.SCHEMA_DIGEST_MAX_LENGTH),
                        },
                    },
                    "importId": _string(limits.IMPORT_ID_MAX_LENGTH, nullable=True),
                    "hostRef": _string(name, nullable=True),
                },
            },
            "uid": _string(uid, "Host-issued uid of the bound incarnation."),
            "generation": _string(counter, "Last seen host metadata.generation (decimal string)."),
            "revision": _string(counter, "Last seen host metadata.revision (decimal string)."),
            "pendingOperationId": _string(
                name,
                "Host operation accepted but not yet seen settled; never dropped "
                "until the operation settles.",
            ),
            "pendingOperationVerb": enum_schema(
                ["Create", "Update", "Delete"], description="What the pending operation does."
            ),
            "attempt": {
                "type": "integer",
                "minimum": 0,
                "description": "Bumped only when an operation of ours ends in error or the bound "
                "resource vanished; part of every idempotency key (docs/crash-safety.md).",
            },
            "outputs": {
                "type": "object",
                "description": "Outputs the host reported, decoded with the recorded ref's codec.",
                "properties": {},
            },
            "observedGeneration": {
                "type": "integer",
                "description": "metadata.generation of this CR the status reflects.",
            },
            "conditions": conditions_schema(
                "Conditions of the closed set " + ", ".join(ConditionType) + ".",
                enum_schema(ConditionType),
            ),
            "remedies": {
                "type": "array",
                "description": "The ways out of the Blocked (or Degraded) condition, as data: "
                "what each does, the command that does it (none for a step on the host) and the "
                "object that command acts on. The condition message states them too.",
                "maxItems": limits.REMEDIES_MAX_ITEMS,
                "items": {
                    "type": "object",
                    "required": ["does"],
                    "properties": {
                        "does": _string(remedy),
                        "command": _string(remedy),
                        "actsOn": _string(remedy),
                    },
                },
            },
        },
    }


def conditions_schema(description: str, type_schema: dict[str, Any]) -> dict[str, Any]:
    """status.conditions of every CRD: metav1.Condition's bounds (core.limits); the operator
    cuts a message at core.limits.CONDITION_MESSAGE_CAP, below the maxLength."""
    return {
        "type": "array",
        "description": description,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "maxItems": limits.CONDITIONS_MAX_ITEMS,
        "items": {
            "type": "object",
            "required": ["type", "status"],
            "properties": {
                "type": type_schema,
                "status": enum_schema(["True", "False", "Unknown"]),
                "reason": _string(limits.CONDITION_REASON_MAX_LENGTH),
                "message": _string(limits.CONDITION_MESSAGE_MAX_LENGTH),
                "lastTransitionTime": _string(limits.TIMESTAMP_MAX_LENGTH, format="date-time"),
                "observedGeneration": {"type": "integer"},
            },
        },
    }


# -- the CRD -------------------------------------------------------------------------------------


def render_crd(
    line: FormLine, definitions: Sequence[FormDefinition], registry: Registry, bounds: Bounds
) -> str:
    fields = merged_fields(definitions)
    default_ref = registry.default_create_ref(line)
    default_note = (
        f" New resources are created under {default_ref.definition_version}"
        if (default_ref)
        else ""
    )
    versions = ", ".join(d.ref.definition_version for d in definitions)
    parameters: dict[str, Any] = {
        "type": "object",
        "description": (
            f"The portable desired fields of {line}. Supported definition versions: {versions}."
            f"{default_note}. The codec of the recorded FormRef is the final judge of this "
            "document; see docs/forms/" + doc_file(line) + "."
        ),
        "properties": {field.name: field_schema(field, bounds) for field in fields},
    }
    required = [field.name for field in fields if field.required_everywhere]
    if required:
        parameters["required"] = required
    spec = {
        "type": "object",
        "required": ["space", "parameters"],
        # Transition rules on the spec itself, so that adding or removing a field is a change
        # too (a rule on the field alone only runs when both old and new values exist).
        "x-kubernetes-validations": [
            _unchanged_rule("resourceName"),
            _unchanged_rule("formRef"),
            _unchanged_rule("hostRef"),
        ],
        "properties": {
            "space": space_schema(
                "Host space (opaque, case-sensitive; '/', control characters and the dot "
                "segments '.' and '..' are forbidden). Immutable."
            ),
            "hostRef": {
                "type": "string",
                "minLength": 1,
                "maxLength": limits.NAME_MAX_LENGTH,
                "description": "Name of the TakoformHost (cluster-scoped) to manage the resource "
                "on; without it, the host marked default. The namespace needs a "
                "TakoformSpaceGrant for the space on that host (docs/tenancy.md). Immutable: it "
                "cannot be added, changed or removed after creation.",
            },
            "resourceName": {
                "type": "string",
                "maxLength": limits.NAME_MAX_LENGTH,
                "description": "Host resource name; defaults to metadata.name. Immutable: it "
                "cannot be added, changed or removed after creation.",
            },
            "formRef": {
                "type": "object",
                "description": "Pin the exact definition to create under (must be supported by "
                "the operator); without it, the line's default create ref is used. Immutable: it "
                "cannot be added, changed or removed after creation.",
                "required": ["definitionVersion", "schemaDigest"],
                "properties": {
                    "definitionVersion": {
                        "type": "string",
                        "maxLength": limits.DEFINITION_VERSION_MAX_LENGTH,
                        "pattern": DEFINITION_VERSION_PATTERN,
                        "description": "MAJOR.MINOR.PATCH, e.g. 1.0.0",
                    },
                    "schemaDigest": {
                        "type": "string",
                        "maxLength": limits.SCHEMA_DIGEST_MAX_LENGTH,
                        "pattern": "^sha256:[0-9a-f]{64}$",
                        "description": "sha256:<64 hex> of the definition schema.",
                    },
                },
            },
            "deletionPolicy": enum_schema(
                ["Delete", "Orphan"],
                default="Delete",
                description="Delete the host resource when this CR is deleted (Delete), or "
                "leave it on the host (Orphan).",
            ),
            "managementPolicy": enum_schema(
                ManagementPolicy,
                default=str(ManagementPolicy.FULL),
                description="Full: the operator creates, updates and deletes the host "
                "resource. Observe: it only reads the exact resource (import it with importId), "
                "fills the status and reports drift from parameters (Drifted SpecDrift) without "
                "repairing it; it never creates, updates or deletes, and deleting the CR leaves "
                "the host resource. Observe then Full is the safe import path.",
            ),
            "importId": {
                "type": "string",
                "maxLength": limits.IMPORT_ID_MAX_LENGTH,
                "description": "Adopt an existing host resource instead of creating one: NAME, "
                "SPACE/NAME, or the canonical JSON import id naming the exact FormRef. Once the "
                "resource is bound, a change is Blocked (IdentityChanged) by the operator.",
            },
            "parameters": parameters,
            **connection_secret_spec(definitions),
        },
    }
    ready = f'.status.conditions[?(@.type=="{ConditionType.READY}")]'
    degraded = f'.status.conditions[?(@.type=="{ConditionType.DEGRADED}")]'
    # The annotation as written: "true" pauses, "false" does not, anything else is refused
    # (Degraded InvalidSpec) and shows here as it is.
    paused = ".metadata.annotations." + PAUSED_ANNOTATION.replace(".", "\\.")
    # The API server prints the first match: Ready's message unless Ready is simply Available,
    # then the first condition that says something else (Degraded during a host outage, the
    # pause), else nothing. Every False condition of a Ready CR carries Available too.
    message = f'.status.conditions[?(@.reason!="{Reason.AVAILABLE}")].message'
    crd = crd_document(
        group=line.group,
        scope="Namespaced",
        kind=line.kind,
        plural=plural_of(line.kind),
        short_name=short_name(line),
        categories=[CATEGORY],
        versions=[
            {
                "name": line.version,
                "served": True,
                "storage": True,
                # Where an import finds a CR whose status records the resource it would
                # bind (kube.bindings.recorded_elsewhere): a field selector, not a list.
                "selectableFields": [
                    {"jsonPath": ".status.space"},
                    {"jsonPath": ".status.name"},
                ],
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Space", "type": "string", "jsonPath": ".spec.space"},
                    {
                        "name": "Host",
                        "type": "string",
                        "jsonPath": ".status.host",
                        "priority": 1,
                    },
                    {
                        "name": "Definition",
                        "type": "string",
                        "jsonPath": ".status.formRef.definitionVersion",
                    },
                    {"name": "Ready", "type": "string", "jsonPath": ready + ".status"},
                    {"name": "Reason", "type": "string", "jsonPath": ready + ".reason"},
                    # Ready stays True through a host outage: only Degraded says so.
                    {"name": "Degraded", "type": "string", "jsonPath": degraded + ".status"},
                    {"name": "Paused", "type": "string", "jsonPath": paused},
                    {
                        "name": "Pending",
                        "type": "string",
                        "jsonPath": ".status.pendingOperationId",
                        "priority": 1,
                    },
                    {"name": "UID", "type": "string", "jsonPath": ".status.uid", "priority": 1},
                    {
                        "name": "Policy",
                        "type": "string",
                        "jsonPath": ".spec.managementPolicy",
                        "priority": 1,
                    },
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    {
                        "name": "Message",
                        "type": "string",
                        "jsonPath": message,
                        "priority": 1,
                    },
                ],
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "description": f"{line.kind}: {definitions[-1].description} "
                        f"Managed by takoform-operator.",
                        "required": ["spec"],
                        "properties": {
                            "apiVersion": _string(limits.API_VERSION_MAX_LENGTH),
                            "kind": _string(limits.KIND_MAX_LENGTH),
                            "metadata": {"type": "object"},
                            "spec": spec,
                            "status": with_outputs_schema(_status_schema(), definitions),
                        },
                    }
                },
            }
        ],
    )
    return crd_text(check_bounded(crd))


# -- connection Secrets (docs/tenancy.md "Connection Secrets") ---------------------------------

#: Where sensitive outputs go when spec.writeConnectionSecretToRef is absent (the operator
#: computes the same name: kube.connection_secrets.secret_name).
DEFAULT_CONNECTION_SECRET = "<metadata.name>-connection"


def has_sensitive_outputs(definitions: Sequence[FormDefinition]) -> bool:
    return any(d.sensitive_outputs for d in definitions)


def connection_secret_spec(definitions: Sequence[FormDefinition]) -> dict[str, Any]:
    """spec.writeConnectionSecretToRef, for the lines whose definitions have sensitive outputs."""
    if not has_sensitive_outputs(definitions):
        return {}
    names = sorted({out.name for d in definitions for out in d.sensitive_outputs})
    return {
        "writeConnectionSecretToRef": {
            "type": "object",
            "description": "The Secret in this CR's namespace the sensitive outputs ("
            + ", ".join(names)
            + ") are written to, owned by this CR; without it, "
            + DEFAULT_CONNECTION_SECRET
            + ". They never appear in the status.",
            "required": ["name"],
            "properties": {
                "name": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 253,
                    "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
                    "description": "Name of the Secret (a DNS subdomain).",
                }
            },
        }
    }


def _output_schema(out: FieldSpec) -> dict[str, Any]:
    """An output's schema in status.outputs, bounded by core.limits (the codec refuses a host
    output above them, so the operator never writes what the API server would refuse)."""
    schema = {"description": out.description, **typed_schema(out)}
    target = schema
    if out.type == "array":
        schema["maxItems"] = limits.OUTPUT_MAX_ITEMS
        target = schema["items"]
    if out.type == "map":
        schema["maxProperties"] = limits.OUTPUT_MAX_PROPERTIES
        schema["x-kubernetes-validations"] = [key_rule(limits.OUTPUT_STRING_MAX_LENGTH, None)]
        target = schema["additionalProperties"]
    if target["type"] == "string":
        target["maxLength"] = limits.OUTPUT_STRING_MAX_LENGTH
    return schema


def _output_union_schema(description: str) -> dict[str, Any]:
    """An output whose type differs between definitions: bounded like a desired field's union
    (_union_schema), by core.limits."""
    string = {"type": "string", "maxLength": limits.OUTPUT_STRING_MAX_LENGTH}
    return {
        "description": description,
        "x-kubernetes-preserve-unknown-fields": True,
        "maxLength": limits.OUTPUT_STRING_MAX_LENGTH,
        "maxItems": limits.OUTPUT_MAX_ITEMS,
        "maxProperties": limits.OUTPUT_MAX_PROPERTIES,
        "items": dict(string),
        "additionalProperties": dict(string),
    }


def with_outputs_schema(
    status: dict[str, Any], definitions: Sequence[FormDefinition]
) -> dict[str, Any]:
    """The status schema with status.outputs narrowed to the outputs that are not sensitive:
    the API server prunes anything else, so a sensitive value can never be stored there."""
    properties: dict[str, Any] = {}
    types: dict[str, dict[str, Any]] = {}
    for definition in sorted(definitions, key=lambda d: d.version_tuple):
        for out in definition.outputs:
            if out.sensitive:
                continue
            schema = _output_schema(out)
            known = types.get(out.name)
            if known is not None and typed_schema(out) != known:
                schema = _output_union_schema(
                    out.description + " Its type differs between definitions."
                )
            types.setdefault(out.name, typed_schema(out))
            properties[out.name] = schema
    outputs = {
        "type": "object",
        "description": "Outputs the host reported, decoded with the recorded ref's codec; "
        "sensitive outputs are never here (they go to the connection Secret).",
        "properties": properties,
    }
    return {**status, "properties": {**status["properties"], "outputs": outputs}}
