"""The example of each generated Form page satisfies its own definition: required fields, enums,
patterns and bounds (tests/kube/test_examples.py proves the same against the API server)."""

from __future__ import annotations

import re

import pytest
import yaml

from takoform_operator import generate
from takoform_operator.core.registry import Registry
from takoform_operator.generate import docs
from takoform_spec.catalog import load_catalog
from takoform_spec.definitions import FieldSpec
from takoform_spec.identity import FormLine, FormRef

CATALOG = load_catalog()
REGISTRY = Registry.from_definitions(CATALOG.definitions, CATALOG.default_creates)
FILES = generate.render(CATALOG, with_chart=False)
LINES = sorted({d.line for d in CATALOG.definitions}, key=str)
REF = FormRef("example.takoform.io/v1", "Widget", "1.0.0", "sha256:" + "0" * 64)


def _example_of(line: FormLine) -> dict[str, object]:
    page = FILES[f"{generate.DOCS_DIR}/{generate.doc_file(line)}"]
    (block,) = re.findall(r"## Example\n\n```yaml\n(.*?)```", page, re.S)
    example: dict[str, object] = yaml.safe_load(block)
    return example


@pytest.mark.parametrize("line", LINES, ids=[line.kind for line in LINES])
def test_each_page_example_is_valid_under_the_default_create_ref(line: FormLine) -> None:
    example = _example_of(line)
    ref = REGISTRY.default_create_ref(line)
    assert ref is not None
    spec = example["spec"]
    assert isinstance(spec, dict)
    # encode() refuses a missing required field, an undeclared one, or a value out of bounds.
    codec = REGISTRY.codec_for(ref)
    assert codec.encode(ref, spec["parameters"]) == spec["parameters"]
    assert example["apiVersion"] == line.api_version and example["kind"] == line.kind


def test_an_example_comes_from_the_description_when_a_sample_would_not_fit() -> None:
    region = FieldSpec(
        name="region",
        type="string",
        description="Region, e.g. eu-west-1. Cannot change.",
        required=True,
        pattern="^[a-z]{2}-[a-z]+-[0-9]$",
    )
    assert docs.example_value(REF, region) == "eu-west-1"
    values = FieldSpec(
        name="values",
        type="array",
        items="string",
        description="Record data, e.g. [192.0.2.10] for A.",
        pattern=r"^[0-9.]+$",
    )
    assert docs.example_value(REF, values) == ["192.0.2.10"]


def test_bounds_shape_the_sample_of_a_number() -> None:
    size = FieldSpec(name="size", type="integer", description="Size.", minimum=10, maximum=20)
    assert docs.example_value(REF, size) == 10


def test_a_field_without_any_acceptable_example_is_refused_at_generation() -> None:
    zone = FieldSpec(
        name="zone",
        type="string",
        description="Availability zone, e.g. somewhere.",
        pattern="^[a-z]{2}-[a-z]+-[0-9][a-z]$",
    )
    with pytest.raises(docs.ExampleUnavailable, match=r"'zone'.*e\.g\. VALUE"):
        docs.example_value(REF, zone)
