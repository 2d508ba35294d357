"""The generator's reference pages: docs/forms/<group>-<kind>.md per Form line and the index.

Each page lists the line's definitions, their fields and outputs, and ends with an example CR
whose values pass the CRD's validation and the host's (`example_value`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import yaml

from takoform_operator.core import limits
from takoform_operator.core.codecs import check_value
from takoform_operator.core.errors import WrongFieldType
from takoform_operator.core.registry import Registry
from takoform_operator.generate.crd import (
    CATEGORY,
    DEFAULT_CONNECTION_SECRET,
    crd_name,
    doc_file,
    has_sensitive_outputs,
    short_name,
)
from takoform_operator.generate.documents import GENERATED_NOTE
from takoform_operator.generate.fields import field_schema, map_key_bounds, merged_fields
from takoform_spec.bounds import Bounds
from takoform_spec.definitions import FieldSpec, FormDefinition
from takoform_spec.identity import FormLine, FormRef, plural_of


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _constraints(spec: FieldSpec) -> str:
    parts = []
    if spec.enum is not None:
        parts.append("one of " + ", ".join(f"`{v}`" for v in spec.enum))
    for label, value in (
        ("pattern", spec.pattern),
        ("minLength", spec.min_length),
        ("maxLength", spec.max_length),
        ("minimum", spec.minimum),
        ("maximum", spec.maximum),
        ("maxItems", spec.max_items),
    ):
        if value is not None:
            parts.append(f"{label} `{value}`")
    if spec.unit:
        parts.append(f"unit {spec.unit}")
    if spec.default is not None:
        parts.append(f"default `{json.dumps(spec.default)}`")
    if spec.immutable:
        parts.append("immutable")
    return "; ".join(parts) or "—"


def _field_table(specs: Sequence[FieldSpec], with_required: bool) -> list[str]:
    if not specs:
        return ["(none)", ""]
    head = (
        "| Name | Type | Required | Constraints | Description |"
        if with_required
        else ("| Name | Type | Description |")
    )
    rule = "|---|---|---|---|---|" if with_required else "|---|---|---|"
    rows = [head, rule]
    for spec in specs:
        if with_required:
            rows.append(
                f"| `{spec.name}` | {spec.type_label} | {'yes' if spec.required else 'no'} | "
                f"{_cell(_constraints(spec))} | {_cell(spec.description)} |"
            )
        else:
            rows.append(f"| `{spec.name}` | {spec.type_label} | {_cell(spec.description)} |")
    return [*rows, ""]


def output_table(outputs: Sequence[FieldSpec]) -> list[str]:
    if not outputs:
        return ["(none)", ""]
    rows = ["| Name | Type | Sensitive | Description |", "|---|---|---|---|"]
    for out in outputs:
        where = "yes: connection Secret only" if out.sensitive else "no"
        rows.append(f"| `{out.name}` | {out.type_label} | {where} | {_cell(out.description)} |")
    return [*rows, ""]


def connection_secret_doc(definitions: Sequence[FormDefinition]) -> list[str]:
    if not has_sensitive_outputs(definitions):
        return []
    return [
        "## Connection Secret",
        "",
        "Outputs marked sensitive never appear in the CR's status: the operator writes them, "
        "as read from the host, into a Secret of the CR's namespace named by "
        "`spec.writeConnectionSecretToRef.name` (default `"
        + DEFAULT_CONNECTION_SECRET
        + "`), one key per output, owned by the CR (see docs/tenancy.md, Connection Secrets).",
        "",
    ]


_EXAMPLE_IN_DESCRIPTION = re.compile(r"e\.g\. (\[[^\]]*\]|\"[^\"]*\"|[^\s;,()]+)")


class ExampleUnavailable(ValueError):
    """No example value that the field's own constraints accept (the catalog must give one)."""


def _example_candidates(spec: FieldSpec) -> list[Any]:
    """Values worth trying, best first: the default, the enum, the description's examples,
    then plain samples shaped by the bounds."""
    candidates: list[Any] = []
    if spec.default is not None:
        candidates.append(spec.default)
    if spec.enum:
        candidates.append(spec.enum[0])
    for text in _EXAMPLE_IN_DESCRIPTION.findall(spec.description):
        for variant in (text, text.rstrip(".")):
            try:
                value = yaml.safe_load(variant)
            except yaml.YAMLError:
                continue
            if spec.type == "string" and not isinstance(value, str):
                value = variant  # e.g. 16 means the string "16" for a string field
            if spec.type == "array" and not isinstance(value, list):
                value = [value]
            candidates.append(value)
    scalar = {"array": spec.items, "map": spec.values}.get(spec.type, spec.type)
    lowest = spec.minimum if spec.minimum is not None else 1
    samples: dict[str | None, Any] = {
        "string": "example",
        "integer": max(int(lowest), 1),
        "number": lowest,
        "boolean": True,
    }
    sample = samples[scalar]
    if spec.type == "array":
        sample = [sample]
    elif spec.type == "map":
        sample = {"team": sample}
    candidates.append(sample)
    return candidates


def example_value(ref: FormRef, spec: FieldSpec) -> Any:
    """A value for `spec` in the generated example that its own declaration accepts (type,
    enum, pattern, bounds), so the example passes the CRD's validation and the host's."""
    for candidate in _example_candidates(spec):
        try:
            return check_value(ref, spec, candidate)
        except WrongFieldType:
            continue
    raise ExampleUnavailable(
        f"{ref}: field {spec.name!r} has no example value its constraints accept; add one to "
        "its description as 'e.g. VALUE'"
    )


def _n(value: int) -> str:
    return f"{value:,}"


def _bound_of(schema: dict[str, Any], union_keys: tuple[int, str | None]) -> str:
    """What one parameters field of the CRD admits at most, in words."""

    def scalar(node: dict[str, Any]) -> str:
        if node.get("type") == "string":
            return f"strings of at most {_n(node['maxLength'])} characters"
        return f"{node.get('type')}s"

    def keys(node: dict[str, Any]) -> str:
        rule = next(
            r["rule"]
            for r in node.get("x-kubernetes-validations", [])
            if r["rule"].startswith("self.all(k, size(k) <= ")
        )
        length = int(rule.split("<= ", 1)[1].split(")", 1)[0].split(" ", 1)[0])
        syntax = " (Kubernetes label keys)" if "matches" in rule else ""
        return f"keys of at most {_n(length)} characters{syntax}"

    kind = schema.get("type")
    if kind is None:
        length, pattern = union_keys
        syntax = " (Kubernetes label keys)" if pattern else ""
        return (
            f"any of its shapes: a map of at most {_n(schema['maxProperties'])} "
            f"{scalar(schema['additionalProperties'])}, keys of at most {_n(length)} "
            f"characters{syntax} (the admission policy beside the CRDs checks them), "
            f"a list of at most {_n(schema['maxItems'])} {scalar(schema['items'])}, or a string of "
            f"at most {_n(schema['maxLength'])} characters; nothing nested"
        )
    if kind == "string":
        return f"{_n(schema['maxLength'])} characters"
    if kind == "array":
        return f"{_n(schema['maxItems'])} {scalar(schema['items'])}"
    if kind == "object":
        return (
            f"{_n(schema['maxProperties'])} entries, {keys(schema)}, values: "
            f"{scalar(schema['additionalProperties'])}"
        )
    return "fixed size"


def _size_limits(definitions: Sequence[FormDefinition], bounds: Bounds) -> list[str]:
    out = [
        "## Size limits",
        "",
        "What the CRD admits at most in `spec.parameters` (the API server refuses more; see "
        "[the catalog's size limits](README.md#size-limits)).",
        "",
        "| field | at most |",
        "|---|---|",
    ]
    for field in merged_fields(definitions):
        schema = field_schema(field, bounds)
        if schema.get("type") in ("integer", "number", "boolean"):
            continue
        bound = _bound_of(schema, map_key_bounds(field, bounds))
        out.append(f"| `{field.name}` | {_cell(bound)} |")
    return [*out, ""]


def render_doc(
    line: FormLine, definitions: Sequence[FormDefinition], registry: Registry, bounds: Bounds
) -> str:
    default_ref = registry.default_create_ref(line)
    out = [
        f"<!-- {GENERATED_NOTE}. Regenerate with `make generate`. -->",
        f"# {line.kind} (`{line.api_version}`)",
        "",
        definitions[-1].description,
        "",
        f"- CRD: `{crd_name(line)}` — `kubectl get {plural_of(line.kind)}` "
        f"(short name `{short_name(line)}`, category `{CATEGORY}`)",
        f"- Default create ref: `{default_ref.definition_version if default_ref else 'none'}`",
        "",
        "## Supported definitions",
        "",
        "| definitionVersion | schemaDigest | codec | default create |",
        "|---|---|---|---|",
    ]
    for d in definitions:
        codec = registry.codec_for(d.ref).codec_id
        default = "yes" if default_ref == d.ref else ""
        out.append(
            f"| {d.ref.definition_version} | `{d.ref.schema_digest}` | `{codec}` | {default} |"
        )
    out += [
        "",
        "Definitions sharing a codec are additive minors of one major: state written under any of "
        "them decodes with that codec, and each ref is still judged by the fields its exact "
        "definition declared.",
        "",
    ]
    disagreements = [f for f in merged_fields(definitions) if not f.types_agree]
    if disagreements:
        out += ["## Fields whose type differs between definitions", ""]
        for field in disagreements:
            types = ", ".join(f"{v}: {s.type_label}" for v, s in field.declarations.items())
            out.append(
                f"- `{field.name}` ({types}): the CRD schema admits each of these shapes here, "
                "one level deep and bounded (a node without a type, "
                "`x-kubernetes-preserve-unknown-fields`, whose `maxProperties`, `maxItems` and "
                "`maxLength` each bound their own shape; see Size limits), and the codec of the "
                "recorded FormRef rejects a value of the wrong shape before anything is sent to "
                "the host."
            )
        out.append("")
    for d in definitions:
        out += [f"## Definition {d.ref.definition_version}", "", "### Fields", ""]
        out += _field_table(d.fields, with_required=True)
        out += ["### Outputs", ""]
        out += output_table(d.outputs)
    out += connection_secret_doc(definitions)
    out += _size_limits(definitions, bounds)
    example_def = next((d for d in definitions if d.ref == default_ref), definitions[-1])
    parameters = {
        spec.name: example_value(example_def.ref, spec)
        for spec in example_def.fields
        if spec.required
    }
    example = {
        "apiVersion": line.api_version,
        "kind": line.kind,
        "metadata": {"name": "example", "namespace": "default"},
        "spec": {"space": "team-a", "deletionPolicy": "Delete", "parameters": parameters},
    }
    out += [
        "## Example",
        "",
        "```yaml",
        yaml.safe_dump(example, sort_keys=False).rstrip(),
        "```",
        "",
    ]
    return "\n".join(out)


def _catalog_limits(bounds: Bounds) -> list[str]:
    labels = bounds.conventions.get("labels")
    rows = [
        (
            "a string of `spec.parameters` without its own `maxLength`",
            f"{_n(bounds.string_max_length)} characters",
        ),
        (
            "a list of `spec.parameters` without its own `maxItems`",
            f"{_n(bounds.list_max_items)} items",
        ),
        (
            "a map of `spec.parameters`",
            f"{_n(bounds.map.max_properties)} entries, keys of at most "
            f"{_n(bounds.map.key_max_length)} characters",
        ),
    ]
    if labels is not None and labels.map is not None:
        rows.append(
            (
                "`labels` as a map (every line)",
                f"{_n(labels.map.max_properties)} labels; keys are Kubernetes label keys of at "
                f"most {_n(labels.map.key_max_length)} characters (a DNS-subdomain prefix of at "
                "most 253 and `/`, then a name of at most 63), values at most "
                f"{_n(labels.map.value_max_length or bounds.string_max_length)} characters",
            )
        )
    if labels is not None and labels.list is not None:
        rows.append(
            (
                "`labels` as a list of `key=value` (every line)",
                f"{_n(labels.list.max_items)} items of at most "
                f"{_n(labels.list.item_max_length or bounds.string_max_length)} characters",
            )
        )
    rows += [
        (
            "a definition's own `maxLength` / `maxItems` (wins over the default)",
            f"{_n(bounds.ceiling_string_max_length)} characters / "
            f"{_n(bounds.ceiling_list_max_items)} items: the generator refuses a definition "
            "above them",
        ),
        ("`spec.space`", f"{_n(limits.SPACE_MAX_LENGTH)} characters"),
        ("`spec.hostRef`, `spec.resourceName`", f"{_n(limits.NAME_MAX_LENGTH)} characters"),
        ("`spec.importId`", f"{_n(limits.IMPORT_ID_MAX_LENGTH)} characters"),
        (
            "a condition message in the status",
            f"{_n(limits.CONDITION_MESSAGE_MAX_LENGTH)} characters; the operator cuts its own at "
            f"{_n(limits.CONDITION_MESSAGE_CAP)} and says so (`... (cut, 12,345 chars)`)",
        ),
        ("an Event message", f"{_n(limits.EVENT_MESSAGE_CAP)} characters, cut the same way"),
        (
            "`status.outputs`",
            f"strings of {_n(limits.OUTPUT_STRING_MAX_LENGTH)} characters, lists of "
            f"{_n(limits.OUTPUT_MAX_ITEMS)} items, maps of {_n(limits.OUTPUT_MAX_PROPERTIES)} "
            "entries: a host output beyond them is refused (Degraded HostStateUndecodable), "
            "never written",
        ),
    ]
    return [
        "## Size limits",
        "",
        "Every string, list and map of every CRD has a bound, so one CR cannot exhaust or stop "
        "the operator for every other namespace: the API server refuses a CR beyond them. The "
        "bounds of `spec.parameters` come from the catalog "
        "(`operator/takoform_spec/catalog/bounds.yaml`, not part of any schemaDigest); each "
        "line's page lists its fields' bounds.",
        "",
        "| what | at most |",
        "|---|---|",
        *(f"| {what} | {_cell(bound)} |" for what, bound in rows),
        "",
        "A field whose type differs between definitions (a Bucket's `labels`) admits each of "
        "its shapes, one level deep, bounded as above. The keys of its map shape are the one "
        "bound no CRD schema can express: the ValidatingAdmissionPolicy "
        "`form-bounds.operator.takoform.io`, shipped with the CRDs (`crds/form-bounds.yaml`), "
        "enforces it (Kubernetes 1.30 or later). It ratchets: an update that leaves the field "
        "as stored passes, so a CR stored before the policy can still lose its finalizer.",
        "",
    ]


def render_index(
    lines: dict[FormLine, list[FormDefinition]], registry: Registry, bounds: Bounds
) -> str:
    out = [
        f"<!-- {GENERATED_NOTE}. Regenerate with `make generate`. -->",
        "# Form catalog",
        "",
        "Every Form line this build supports, one CRD each. See "
        "[schema-digest.md](../schema-digest.md) for how a schemaDigest is computed.",
        "",
        "| Form line | Definition versions | Default create | CRD |",
        "|---|---|---|---|",
    ]
    for line, definitions in lines.items():
        default_ref = registry.default_create_ref(line)
        versions = ", ".join(d.ref.definition_version for d in definitions)
        out.append(
            f"| [{line.api_version} {line.kind}]({doc_file(line)}) | {versions} | "
            f"{default_ref.definition_version if default_ref else '—'} | `{crd_name(line)}` |"
        )
    return "\n".join([*out, "", *_catalog_limits(bounds)])
