"""The generator: registry data, one structural CRD per Form line, the TakoformBinding CRD,
reference docs, --check."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from takoform_operator import cli, generate
from takoform_operator.core.binding import (
    BINDING_KIND,
    BINDING_PLURAL,
    Binding,
    ClaimRef,
    Identity,
    Phase,
    binding_from_json,
)
from takoform_operator.core.conditions import ConditionType
from takoform_operator.core.import_id import canonical_import_id
from takoform_operator.core.state import Requested
from takoform_operator.generate import flux, monitoring
from takoform_spec.catalog import load_catalog
from takoform_spec.definitions import FormDefinition
from takoform_spec.identity import FormLine, FormRef

from .strategies import document_strategy

REPO_ROOT = Path(__file__).resolve().parents[2]
CATALOG = load_catalog()
CHART = REPO_ROOT / "charts" / "takoform-operator"
WITH_CHART = (CHART / "Chart.yaml").is_file()
FILES = generate.render(CATALOG, with_chart=WITH_CHART)


def lines() -> dict[FormLine, list[FormDefinition]]:
    result: dict[FormLine, list[FormDefinition]] = {}
    for definition in sorted(CATALOG.definitions, key=lambda d: (d.line, d.version_tuple)):
        result.setdefault(definition.line, []).append(definition)
    return result


LINES = lines()
LINE_IDS = [f"{line.kind}" for line in LINES]


def crd_of(line: FormLine) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(
        FILES[f"{generate.CRD_DIR}/{generate.crd_file(line)}"]
    )
    return document


def version_of(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    result: dict[str, Any] = version
    return result


def schema_of(crd: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = version_of(crd)["schema"]["openAPIV3Schema"]
    return schema


def parameters_of(crd: dict[str, Any]) -> dict[str, Any]:
    parameters: dict[str, Any] = schema_of(crd)["properties"]["spec"]["properties"]["parameters"]
    return parameters


# -- the committed tree and determinism -------------------------------------------------------


def test_generate_check_passes_on_the_committed_tree(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(REPO_ROOT)
    assert cli.main(["generate", "--check"]) == 0, capsys.readouterr().err


def test_render_is_deterministic() -> None:
    again = generate.render(load_catalog(), with_chart=WITH_CHART)
    assert again == FILES
    assert list(again) == list(FILES)


@pytest.mark.parametrize("path", sorted(FILES))
def test_every_generated_file_opens_with_the_do_not_edit_note_in_its_own_syntax(path: str) -> None:
    """The note is the first thing a reader (or a parser) meets, as a comment of that format,
    and says how to regenerate where the format has comments."""
    text = FILES[path]
    first, second, *_ = [*text.split("\n", 2), ""]
    if path.endswith(".json"):
        document = json.loads(text)
        assert next(iter(document)) == "comment", "the note is the first member"
        assert "do not edit" in document["comment"]
        assert "takoform-operator generate" in document["comment"]
    elif path.endswith(".yaml"):
        assert first.startswith("# ") and "do not edit" in first
        assert second == "# Regenerate with `make generate`."
        documents = list(yaml.safe_load_all(text))
        assert documents and None not in documents, "the note is a comment, not content"
    elif path.endswith(".md"):
        assert first.startswith("<!-- ") and first.endswith(" -->")
        assert "do not edit" in first and "`make generate`" in first
    else:
        pytest.fail(f"{path}: a generated file of a format this test does not know")


def test_the_generator_writes_registry_data_crds_and_docs() -> None:
    assert generate.REGISTRY_PATH in FILES
    assert f"{generate.DOCS_DIR}/README.md" in FILES
    for line in LINES:
        assert f"{generate.CRD_DIR}/{generate.crd_file(line)}" in FILES
        assert f"{generate.DOCS_DIR}/{generate.doc_file(line)}" in FILES
        if WITH_CHART:
            assert f"{generate.CHART_CRD_DIR}/{generate.crd_file(line)}" in FILES


def test_the_catalog_is_realistic() -> None:
    assert len(LINES) >= 11
    assert max(len(definitions) for definitions in LINES.values()) >= 3
    majors = {line: {d.ref.major for d in defs} for line, defs in LINES.items()}
    assert any(len(m) >= 2 for m in majors.values()), "one line carries a breaking major"


# -- check mode on a copy of the tree ---------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Path]:
    """A copy of just what the generator owns, to change without touching the checkout."""
    for relative in [generate.CRD_DIR, generate.DOCS_DIR]:
        shutil.copytree(REPO_ROOT / relative, tmp_path / relative)
    registry = tmp_path / generate.REGISTRY_PATH
    registry.parent.mkdir(parents=True)
    shutil.copy(REPO_ROOT / generate.REGISTRY_PATH, registry)
    if WITH_CHART:
        (tmp_path / "charts" / "takoform-operator").mkdir(parents=True)
        shutil.copy(CHART / "Chart.yaml", tmp_path / "charts" / "takoform-operator")
        shutil.copytree(REPO_ROOT / generate.CHART_CRD_DIR, tmp_path / generate.CHART_CRD_DIR)
        for generated in (flux.EXPRS_PATH, monitoring.VALUES_PATH):
            (tmp_path / generated).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO_ROOT / generated, tmp_path / generated)
    yield tmp_path


def check(root: Path) -> int:
    return cli.main(["generate", "--check", "--root", str(root)])


def test_check_passes_on_an_unchanged_copy(tree: Path) -> None:
    assert check(tree) == 0


def test_check_detects_a_modified_file(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    crd = f"{generate.CRD_DIR}/{generate.crd_file(next(iter(LINES)))}"
    (tree / crd).write_text((tree / crd).read_text(encoding="utf-8") + "# hand edit\n")
    assert check(tree) == 1
    assert crd in capsys.readouterr().err
    assert generate.differences(tree, FILES, WITH_CHART) == [crd]


def test_check_detects_edited_registry_data(tree: Path) -> None:
    path = tree / generate.REGISTRY_PATH
    path.write_text(path.read_text(encoding="utf-8").replace("1.1.0", "1.1.1", 1))
    assert check(tree) == 1


def test_check_detects_a_stale_extra_file(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tree / generate.CRD_DIR / "gadgets.old.takoform.io.yaml").write_text("kind: Stale\n")
    (tree / generate.DOCS_DIR / "old.md").write_text("# old\n")
    assert check(tree) == 1
    assert generate.differences(tree, FILES, WITH_CHART) == [
        "crds/gadgets.old.takoform.io.yaml (stale)",
        "docs/forms/old.md (stale)",
    ]
    assert "gadgets.old.takoform.io.yaml" in capsys.readouterr().err


def test_check_detects_a_missing_file(tree: Path) -> None:
    (tree / generate.DOCS_DIR / generate.doc_file(next(iter(LINES)))).unlink()
    assert check(tree) == 1


def test_generate_repairs_the_copy(tree: Path) -> None:
    (tree / generate.CRD_DIR / "stale.yaml").write_text("kind: Stale\n")
    (tree / generate.REGISTRY_PATH).write_text("{}\n")
    assert cli.main(["generate", "--root", str(tree)]) == 0
    assert not (tree / generate.CRD_DIR / "stale.yaml").exists()
    assert check(tree) == 0


# -- the CRDs ---------------------------------------------------------------------------------

_SCHEMA_KEYS = {
    "type",
    "description",
    "properties",
    "items",
    "additionalProperties",
    "required",
    "enum",
    "pattern",
    "format",
    "minLength",
    "maxLength",
    "maxProperties",
    "minimum",
    "maximum",
    "maxItems",
    "default",
    "nullable",
}


def structural_problems(node: dict[str, Any], where: str) -> list[str]:
    """The rules of a Kubernetes structural schema this generator can break."""
    problems = []
    unknown = {k for k in node if k not in _SCHEMA_KEYS and not k.startswith("x-kubernetes-")}
    if unknown:
        problems.append(f"{where}: keys a structural schema does not allow: {sorted(unknown)}")
    if not node.get("type") and not node.get("x-kubernetes-preserve-unknown-fields"):
        problems.append(f"{where}: no type")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{where}: both properties and additionalProperties")
    if node.get("type") == "array" and "items" not in node:
        problems.append(f"{where}: array without items")
    for name, child in node.get("properties", {}).items():
        problems += structural_problems(child, f"{where}.{name}")
    if isinstance(node.get("items"), dict):
        problems += structural_problems(node["items"], f"{where}[]")
    if isinstance(node.get("additionalProperties"), dict):
        problems += structural_problems(node["additionalProperties"], f"{where}{{}}")
    for name in node.get("required", []):
        if name not in node.get("properties", {}):
            problems.append(f"{where}: requires undeclared {name}")
    return problems


@pytest.mark.parametrize("line", LINES, ids=LINE_IDS)
def test_each_crd_is_a_structural_v1_crd_with_status_and_columns(line: FormLine) -> None:
    crd = crd_of(line)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == f"{crd['spec']['names']['plural']}.{line.group}"
    assert crd["spec"]["group"] == line.group
    names = crd["spec"]["names"]
    assert names["kind"] == line.kind
    assert names["categories"] == ["takoform"]
    assert names["shortNames"]
    version = version_of(crd)
    assert version["name"] == line.version
    assert version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    columns = version["additionalPrinterColumns"]
    assert {"Space", "Ready", "Age"} <= {c["name"] for c in columns}
    for column in columns:
        assert column["jsonPath"].startswith(".") and column["type"] in {"string", "date"}
    assert structural_problems(schema_of(crd), "openAPIV3Schema") == []


def test_crd_names_are_unique_across_lines() -> None:
    names = [crd_of(line)["metadata"]["name"] for line in LINES]
    short = [crd_of(line)["spec"]["names"]["shortNames"][0] for line in LINES]
    assert len(set(names)) == len(names) and len(set(short)) == len(short)


@pytest.mark.parametrize("line", LINES, ids=LINE_IDS)
def test_each_crd_spec_carries_space_form_ref_deletion_policy_and_parameters(
    line: FormLine,
) -> None:
    spec = schema_of(crd_of(line))["properties"]["spec"]
    assert {"space", "formRef", "deletionPolicy", "parameters"} <= set(spec["properties"])
    assert {"space", "parameters"} <= set(spec["required"])
    space = spec["properties"]["space"]
    assert re.search(space["pattern"], "équipe A") and not re.search(space["pattern"], "a/b")
    policy = spec["properties"]["deletionPolicy"]
    assert (policy["enum"], policy["default"]) == (["Delete", "Orphan"], "Delete")
    form_ref = spec["properties"]["formRef"]
    assert set(form_ref["required"]) == {"definitionVersion", "schemaDigest"}
    status = schema_of(crd_of(line))["properties"]["status"]["properties"]
    for member in (
        "formRef",
        "name",
        "space",
        "uid",
        "generation",
        "revision",
        "pendingOperationId",
        "outputs",
        "conditions",
        "observedGeneration",
    ):
        assert member in status, member
    # The closed set the operator writes (merge_conditions walks ConditionType) is admitted.
    assert status["conditions"]["items"]["properties"]["type"]["enum"] == list(ConditionType)


@pytest.mark.parametrize("line", LINES, ids=LINE_IDS)
def test_every_field_of_every_definition_is_a_described_parameter(line: FormLine) -> None:
    properties = parameters_of(crd_of(line))["properties"]
    for definition in LINES[line]:
        for spec in definition.fields:
            assert spec.name in properties, (definition.ref, spec.name)
            assert properties[spec.name]["description"].strip()


@pytest.mark.parametrize("line", LINES, ids=LINE_IDS)
def test_only_fields_required_by_every_definition_are_required(line: FormLine) -> None:
    required = set(parameters_of(crd_of(line)).get("required", []))
    everywhere = set.intersection(*({s.name for s in d.fields if s.required} for d in LINES[line]))
    assert required == everywhere


def test_a_field_whose_type_differs_between_definitions_admits_any_value() -> None:
    labels = parameters_of(crd_of(FormLine("storage.takoform.io/v1", "Bucket")))["properties"][
        "labels"
    ]
    assert labels["x-kubernetes-preserve-unknown-fields"] is True
    assert "type" not in labels
    assert "1.0.0" in labels["description"] and "2.0.0" in labels["description"]


def test_a_field_only_some_definitions_declare_says_which() -> None:
    params = parameters_of(crd_of(FormLine("storage.takoform.io/v1", "Bucket")))["properties"]
    assert "1.0.0, 1.1.0" in params["sizeGiB"]["description"]
    assert params["sizeGiB"]["type"] == "integer"


# -- the CRD schema admits every supported definition's valid documents -------------------------


def admits(schema: dict[str, Any], value: Any) -> bool:
    """A small OpenAPI validator for the subset the generator emits."""
    if schema.get("x-kubernetes-preserve-unknown-fields") and "type" not in schema:
        # A bounded union (generate.fields._union_schema): each value validation bounds its type.
        if isinstance(value, dict) and len(value) > schema["maxProperties"]:
            return False
        if isinstance(value, dict):
            return all(admits(schema["additionalProperties"], item) for item in value.values())
        if isinstance(value, list):
            return len(value) <= schema["maxItems"] and all(
                admits(schema["items"], item) for item in value
            )
        return not isinstance(value, str) or len(value) <= schema["maxLength"]
    kind = schema.get("type")
    checks = {
        "string": lambda v: isinstance(v, str),
        "boolean": lambda v: isinstance(v, bool),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "array": lambda v: isinstance(v, list),
        "object": lambda v: isinstance(v, dict),
    }
    if kind and not checks[kind](value):
        return False
    if "enum" in schema and value not in schema["enum"]:
        return False
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            return False
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", 1e9):
            return False
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and not schema.get("minimum", -1e308) <= value <= schema.get("maximum", 1e308):
        return False
    if isinstance(value, list):
        if len(value) > schema.get("maxItems", 1e9):
            return False
        return all(admits(schema["items"], item) for item in value)
    if isinstance(value, dict):
        if any(name not in value for name in schema.get("required", [])):
            return False
        if len(value) > schema.get("maxProperties", 1e9):
            return False
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            child = properties.get(key, extra)
            if child is None or not admits(child, item):
                return False
    return True


@pytest.mark.parametrize(
    "definition", CATALOG.definitions, ids=lambda d: f"{d.ref.kind}-{d.ref.definition_version}"
)
@settings(max_examples=15, suppress_health_check=[HealthCheck.filter_too_much])
@given(data=st.data())
def test_the_crd_admits_every_valid_document_of_every_definition(
    definition: FormDefinition, data: st.DataObject
) -> None:
    doc = data.draw(document_strategy(definition.fields))
    assert admits(parameters_of(crd_of(definition.line)), doc), doc


# -- docs -------------------------------------------------------------------------------------


@pytest.mark.parametrize("line", LINES, ids=LINE_IDS)
def test_each_reference_page_lists_every_definition_and_field(line: FormLine) -> None:
    page = FILES[f"{generate.DOCS_DIR}/{generate.doc_file(line)}"]
    for definition in LINES[line]:
        assert f"## Definition {definition.ref.definition_version}" in page
        assert definition.ref.schema_digest in page
        for spec in definition.fields:
            assert f"`{spec.name}`" in page


def test_the_bucket_page_explains_the_disagreeing_field() -> None:
    page = FILES[f"{generate.DOCS_DIR}/storage.takoform.io-bucket.md"]
    assert "Fields whose type differs between definitions" in page
    assert "`labels`" in page and "x-kubernetes-preserve-unknown-fields" in page


def test_the_docs_index_lists_every_line() -> None:
    index = FILES[f"{generate.DOCS_DIR}/README.md"]
    for line in LINES:
        assert f"({generate.doc_file(line)})" in index


@pytest.mark.parametrize(
    ("kind", "plural"),
    [("Bucket", "buckets"), ("Policy", "policies"), ("Gateway", "gateways"), ("Box", "boxes")],
)
def test_plural_of(kind: str, plural: str) -> None:
    assert FormLine("example.takoform.io/v1", kind).plural == plural


# -- the TakoformBinding CRD ------------------------------------------------------------------

BINDING_FILE = "takoformbindings.operator.takoform.io.yaml"
BINDING_CRD: dict[str, Any] = yaml.safe_load(FILES[f"{generate.CRD_DIR}/{BINDING_FILE}"])
BINDING_SPEC: dict[str, Any] = schema_of(BINDING_CRD)["properties"]["spec"]


def _strings(node: dict[str, Any], where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if node.get("type") == "string":
        yield where, node
    for name, child in node.get("properties", {}).items():
        yield from _strings(child, f"{where}.{name}")


def test_the_binding_crd_is_cluster_scoped_structural_and_has_no_status() -> None:
    assert FILES[f"{generate.CRD_DIR}/{BINDING_FILE}"] == FILES.get(
        f"{generate.CHART_CRD_DIR}/{BINDING_FILE}", FILES[f"{generate.CRD_DIR}/{BINDING_FILE}"]
    )
    if WITH_CHART:
        assert f"{generate.CHART_CRD_DIR}/{BINDING_FILE}" in FILES
    spec = BINDING_CRD["spec"]
    assert (spec["group"], spec["scope"]) == ("operator.takoform.io", "Cluster")
    names = spec["names"]
    assert (names["kind"], names["plural"], names["shortNames"]) == (
        BINDING_KIND,
        BINDING_PLURAL,
        ["tkb"],
    )
    # Like the other policy objects, out of the `takoform` category: `kubectl get takoform`
    # would otherwise fail with Forbidden for every namespace user, who may not list them.
    assert "categories" not in names
    version = version_of(BINDING_CRD)
    assert version["name"] == "v1alpha1" and "subresources" not in version
    assert "status" not in schema_of(BINDING_CRD)["properties"]
    assert structural_problems(schema_of(BINDING_CRD), "openAPIV3Schema") == []
    assert BINDING_SPEC["properties"]["phase"]["enum"] == [str(p) for p in Phase]
    for ref in ("claimRef", "lastOwner"):
        assert BINDING_SPEC["properties"][ref]["required"] == ["namespace", "name"]


def test_every_binding_string_is_bounded_as_the_cr_fields_it_records() -> None:
    unbounded = {where for where, node in _strings(BINDING_SPEC, "spec") if "maxLength" not in node}
    assert unbounded == set()
    cr_spec = schema_of(crd_of(next(iter(LINES))))["properties"]["spec"]["properties"]
    # A binding records the CR's space and import id: the same bounds, or the API server would
    # admit a CR whose binding it then refuses.
    assert (
        BINDING_SPEC["properties"]["requested"]["properties"]["importId"]["maxLength"]
        == cr_spec["importId"]["maxLength"]
    )
    cr_space = schema_of(crd_of(next(iter(LINES))))["properties"]["spec"]["properties"]["space"]

    def shape(schema: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in schema.items() if k != "description"}

    assert shape(BINDING_SPEC["properties"]["space"]) == shape(cr_space)
    requested = BINDING_SPEC["properties"]["requested"]["properties"]["space"]
    assert (requested["pattern"], requested["minLength"]) == (cr_space["pattern"], 1)
    bounds = {
        w: node["maxLength"] for w, node in _strings(BINDING_SPEC, "spec") if w not in unbounded
    }
    assert bounds["spec.resourceName"] == bounds["spec.claimRef.name"] == 253
    assert bounds["spec.claimRef.namespace"] == 63
    assert bounds["spec.uid"] == bounds["spec.claimRef.uid"] == bounds["spec.lastOwner.uid"] == 128


def test_the_binding_patterns_are_the_identity_checks() -> None:
    from takoform_spec import identity

    props = BINDING_SPEC["properties"]
    assert props["apiVersion"]["pattern"] == identity._API_VERSION.pattern
    assert props["kind"]["pattern"] == identity._KIND.pattern
    assert props["resourceName"]["pattern"] == identity._NAME.pattern
    form_ref = props["formRef"]["properties"]
    assert form_ref["definitionVersion"]["pattern"] == identity._DEFINITION_VERSION.pattern
    assert form_ref["schemaDigest"]["pattern"] == identity._SCHEMA_DIGEST.pattern
    # The object name is the identity's digest: the identity fields cannot change.
    for field in ("host", "space", "apiVersion", "kind", "resourceName"):
        rules = [r["rule"] for r in props[field]["x-kubernetes-validations"]]
        assert "self == oldSelf" in rules, field


def test_the_binding_columns() -> None:
    columns = version_of(BINDING_CRD)["additionalPrinterColumns"]
    shown = [(c["name"], c["jsonPath"]) for c in columns if not c.get("priority")]
    assert shown == [
        ("Phase", ".spec.phase"),
        ("Host", ".spec.host"),
        ("Space", ".spec.space"),
        ("Kind", ".spec.kind"),
        ("Resource", ".spec.resourceName"),
        ("Namespace", ".spec.claimRef.namespace"),
        ("Claim", ".spec.claimRef.name"),
        ("Age", ".metadata.creationTimestamp"),
    ]
    wide = [(c["name"], c["jsonPath"]) for c in columns if c.get("priority") == 1]
    assert wide == [
        ("Last-Owner-Namespace", ".spec.lastOwner.namespace"),
        ("Last-Owner", ".spec.lastOwner.name"),
        ("UID", ".spec.uid"),
    ]


def _fits(value: Any, schema: dict[str, Any], where: str) -> list[str]:
    """What of `value` the schema would refuse (the checks this CRD uses)."""
    if value is None:
        return [] if schema.get("nullable") else [f"{where}: null"]
    problems = []
    if schema["type"] == "object":
        for name in schema.get("required", []):
            if name not in value:
                problems.append(f"{where}: {name} missing")
        for name, child in value.items():
            if name not in schema["properties"]:
                problems.append(f"{where}.{name}: not declared (pruned)")
            else:
                problems += _fits(child, schema["properties"][name], f"{where}.{name}")
    elif schema["type"] == "string":
        if not isinstance(value, str):
            return [f"{where}: not a string"]
        if len(value) > schema.get("maxLength", len(value)) or len(value) < schema.get(
            "minLength", 0
        ):
            problems.append(f"{where}: length {len(value)}")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            problems.append(f"{where}: {value!r} does not match {schema['pattern']}")
        if "enum" in schema and value not in schema["enum"]:
            problems.append(f"{where}: {value!r} not in {schema['enum']}")
    return problems


def test_every_binding_the_operator_writes_fits_the_schema() -> None:
    line = FormLine("storage.takoform.io/v1", "Bucket")
    ref = FormRef(line.api_version, line.kind, "1.1.0", "sha256:" + "0" * 64)
    identity = Identity("équipe A", line, "logs.eu-1", "prod")
    full = Binding(
        identity,
        Phase.RELEASED,
        ClaimRef("team-a", "logs"),
        ref,
        Requested(
            "équipe A",
            "logs.eu-1",
            ("1.1.0", ref.schema_digest),
            canonical_import_id("équipe A", "logs.eu-1", ref),
            "prod",
        ),
        "0190-host-uid",
        ClaimRef("team-b", "old.logs", "6f1d3b1e-0000-4000-8000-000000000000"),
        "42",
    )
    bare = Binding(Identity("s", line, "n"), Phase.BOUND, None, requested=Requested("s", "n"))
    for binding in (full, bare):
        document = binding.to_json()
        assert _fits(document["spec"], BINDING_SPEC, "spec") == []
        assert binding_from_json(document) == binding
