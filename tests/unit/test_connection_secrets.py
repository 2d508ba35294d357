"""Connection Secrets, the pure parts: sensitive outputs in the catalog, the decision of what to
write (core.connection), the comparison that keeps a steady state free of writes and the
ownership test (kube.connection_secrets), and the generated CRDs and docs."""

from __future__ import annotations

import base64
from dataclasses import replace
from typing import Any

import pytest
import yaml
from builders import served

from takoform_operator import generate
from takoform_operator.core.connection import (
    ConnectionSecret,
    connection_secret,
    has_connection_secret,
    redact,
    secret_name,
)
from takoform_operator.core.registry import Registry
from takoform_operator.core.state import Pending, ResourceView, State, Verb
from takoform_operator.kube.connection_secrets import is_ours, wanted_patch
from takoform_spec.catalog import load_catalog
from takoform_spec.definitions import check_compatibility
from takoform_spec.errors import CatalogError, CompatibilityError
from takoform_spec.identity import FormLine

from .synthetic import build, definition_doc, field

CATALOG = load_catalog()
REGISTRY = Registry.from_definitions(CATALOG.definitions, CATALOG.default_creates)
POSTGRES = FormLine("database.takoform.io/v1", "PostgresInstance")
BUCKET = FormLine("storage.takoform.io/v1", "Bucket")
PG_REF = REGISTRY.default_create_ref(POSTGRES)
assert PG_REF is not None
OUTPUTS = {
    "host": "orders.db.example",
    "port": 5432,
    "connectionSecretName": "orders-postgresinstance-credentials",
    "username": "orders_admin",
    "password": "s3cr3t-Pa55word-0123456789",
    "connectionString": "postgresql://orders_admin:s3cr3t-Pa55word-0123456789@orders/postgres",
}
SENSITIVE = {k: OUTPUTS[k] for k in ("username", "password", "connectionString")}
RESOURCE = served(form_ref=PG_REF, name="orders", spec={}, outputs=OUTPUTS)
BOUND = State(form_ref=PG_REF, space="team-a", name="orders", uid="u-1")
OWNER = {
    "apiVersion": "database.takoform.io/v1",
    "kind": "PostgresInstance",
    "metadata": {"name": "orders", "namespace": "shop", "uid": "cr-uid-1"},
}


# -- the catalog -------------------------------------------------------------------------------


def test_the_shipped_lines_with_credentials_declare_them_sensitive() -> None:
    assert has_connection_secret(REGISTRY, POSTGRES)
    assert has_connection_secret(REGISTRY, FormLine("database.takoform.io/v1", "RedisCache"))
    assert has_connection_secret(REGISTRY, FormLine("pki.takoform.io/v1", "Certificate"))
    assert not has_connection_secret(REGISTRY, BUCKET)
    codec = REGISTRY.codec_for(PG_REF)
    assert {o.name for o in codec.outputs_for(PG_REF) if o.sensitive} == set(SENSITIVE)


def test_an_output_is_marked_sensitive_and_only_a_string_may_be() -> None:
    secret = field("password", sensitive=True)
    definition = build(definition_doc(outputs=[field("endpoint"), secret]))
    assert [o.name for o in definition.sensitive_outputs] == ["password"]
    with pytest.raises(CatalogError, match="sensitive is true or false"):
        build(definition_doc(outputs=[field("password", sensitive="yes")]))
    with pytest.raises(CatalogError, match="of type string"):
        build(definition_doc(outputs=[field("pin", "integer", sensitive=True)]))
    with pytest.raises(CatalogError, match="unknown member"):
        build(definition_doc(fields=[field("password", sensitive=True)]))


@pytest.mark.parametrize(("before", "after"), [(False, True), (True, False)])
def test_a_minor_may_not_move_an_output_in_or_out_of_the_secret(before: bool, after: bool) -> None:
    older = build(definition_doc("1.0.0", outputs=[field("token", sensitive=before)]))
    newer = build(definition_doc("1.1.0", outputs=[field("token", sensitive=after)]))
    with pytest.raises(CompatibilityError, match="sensitive"):
        check_compatibility([older, newer])


def test_a_minor_may_add_a_sensitive_output() -> None:
    older = build(definition_doc("1.0.0", outputs=[field("endpoint")]))
    newer = build(
        definition_doc("1.1.0", outputs=[field("endpoint"), field("token", sensitive=True)])
    )
    check_compatibility([older, newer])


# -- what to write (core.connection) -----------------------------------------------------------


def test_the_secret_holds_exactly_the_sensitive_outputs_of_the_bound_read() -> None:
    secret = connection_secret(REGISTRY, BOUND, RESOURCE, namespace="shop", name="orders-conn")
    assert secret is not None
    assert (secret.namespace, secret.name, dict(secret.data)) == ("shop", "orders-conn", SENSITIVE)
    # The status side of the same read holds none of them.
    shown = REGISTRY.codec_for(PG_REF).decode_outputs(PG_REF, OUTPUTS)
    assert not set(SENSITIVE) & set(shown) and shown["host"] == OUTPUTS["host"]


@pytest.mark.parametrize(
    ("state", "resource", "why"),
    [
        (BOUND, None, "nothing was read"),
        (State(form_ref=PG_REF, space="team-a", name="orders"), RESOURCE, "not bound"),
        (replace(BOUND, pending=Pending("op-1", Verb.UPDATE)), RESOURCE, "an operation pending"),
        (replace(BOUND, uid="u-2"), RESOURCE, "another incarnation (uid mismatch)"),
        (BOUND, replace(RESOURCE, outputs={"host": "h"}), "no sensitive output reported"),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_nothing_is_written_unless_the_read_is_the_bound_incarnation_settled(
    state: State, resource: ResourceView | None, why: str
) -> None:
    assert connection_secret(REGISTRY, state, resource, namespace="n", name="s") is None, why


def test_the_default_name_and_the_named_one() -> None:
    assert secret_name("orders", None) == "orders-connection"
    assert secret_name("orders", "db-credentials") == "db-credentials"


def test_values_never_show_in_the_repr_and_are_redacted_from_messages() -> None:
    secret = ConnectionSecret("shop", "orders-connection", SENSITIVE)
    assert all(value not in repr(secret) for value in SENSITIVE.values())
    message = f"refused: data.password {OUTPUTS['password']} in {OUTPUTS['connectionString']}"
    redacted = redact(message, SENSITIVE)
    assert all(value not in redacted for value in SENSITIVE.values())
    assert redacted.startswith("refused: data.password <redacted>")


# -- what the API server is asked (kube.connection_secrets) -------------------------------------


def _stored(
    data: dict[str, str], references: list[dict[str, Any]] | None = None, **labels: str
) -> dict[str, Any]:
    patch = wanted_patch(None, OWNER, ConnectionSecret("shop", "orders-connection", data))
    assert patch is not None
    patch["metadata"]["resourceVersion"] = "41"
    if references is not None:
        patch["metadata"]["ownerReferences"] = references
    patch["metadata"]["labels"].update(labels)
    return patch


def test_a_new_secret_is_opaque_owned_by_its_cr_and_labelled() -> None:
    created = wanted_patch(None, OWNER, ConnectionSecret("shop", "orders-connection", SENSITIVE))
    assert created is not None
    assert created["type"] == "Opaque"
    assert created["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "database.takoform.io/v1",
            "kind": "PostgresInstance",
            "name": "orders",
            "uid": "cr-uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert created["metadata"]["labels"]["takoform.io/owner-name"] == "orders"
    decoded = {k: base64.b64decode(v).decode() for k, v in created["data"].items()}
    assert decoded == SENSITIVE


def test_an_unchanged_secret_is_not_written() -> None:
    secret = ConnectionSecret("shop", "orders-connection", SENSITIVE)
    assert wanted_patch(_stored(SENSITIVE), OWNER, secret) is None


def test_a_changed_value_is_patched_with_a_precondition_and_stale_keys_removed() -> None:
    current = _stored({**SENSITIVE, "old": "x"})
    rotated = {**SENSITIVE, "password": "new-password-9876543210"}
    patch = wanted_patch(current, OWNER, ConnectionSecret("shop", "orders-connection", rotated))
    assert patch is not None
    assert patch["metadata"] == {"resourceVersion": "41"}
    assert patch["data"]["old"] is None
    assert base64.b64decode(patch["data"]["password"]).decode() == rotated["password"]


@pytest.mark.parametrize(
    ("secret", "ours"),
    [
        pytest.param(_stored(SENSITIVE), True, id="owned by this CR"),
        pytest.param(_stored(SENSITIVE, []), True, id="released by an Orphan CR of this name"),
        pytest.param(
            _stored(SENSITIVE, [{"uid": "other", "controller": True}]),
            False,
            id="controlled by something else",
        ),
        pytest.param(
            _stored(SENSITIVE, [], **{"takoform.io/owner-name": "billing"}),
            False,
            id="made for another CR",
        ),
        pytest.param(
            {"metadata": {"name": "orders-connection", "resourceVersion": "1"}, "data": {}},
            False,
            id="a Secret of the user's",
        ),
    ],
)
def test_only_our_secret_is_ever_written(secret: dict[str, Any], ours: bool) -> None:
    assert is_ours(secret, OWNER) is ours


# -- the generated CRDs and docs -------------------------------------------------------------


FILES = generate.render(CATALOG, with_chart=False)


def _crd(line: FormLine) -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load(FILES[f"{generate.CRD_DIR}/{generate.crd_file(line)}"])
    return crd


def _schema(line: FormLine) -> dict[str, Any]:
    schema: dict[str, Any] = _crd(line)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_the_status_schema_has_no_room_for_a_sensitive_output() -> None:
    for line in REGISTRY.lines():
        outputs = _schema(line)["properties"]["status"]["properties"]["outputs"]
        assert "x-kubernetes-preserve-unknown-fields" not in outputs
        sensitive = {
            spec.name
            for ref in REGISTRY.known_refs(line)
            for spec in REGISTRY.codec_for(ref).outputs_for(ref)
            if spec.sensitive
        }
        assert not sensitive & set(outputs["properties"]), line
    pg = _schema(POSTGRES)["properties"]["status"]["properties"]["outputs"]["properties"]
    assert {"host", "port", "connectionSecretName"} <= set(pg)


def test_write_connection_secret_to_ref_only_where_there_are_sensitive_outputs() -> None:
    for line in REGISTRY.lines():
        spec = _schema(line)["properties"]["spec"]["properties"]
        assert ("writeConnectionSecretToRef" in spec) is has_connection_secret(REGISTRY, line)
    ref = _schema(POSTGRES)["properties"]["spec"]["properties"]["writeConnectionSecretToRef"]
    assert ref["required"] == ["name"]


def test_the_docs_mark_sensitive_outputs_and_name_the_secret() -> None:
    page = FILES[f"{generate.DOCS_DIR}/{generate.doc_file(POSTGRES)}"]
    assert "| `password` | string | yes: connection Secret only |" in page
    assert "| `host` | string | no |" in page
    assert "## Connection Secret" in page and "<metadata.name>-connection" in page
    bucket = FILES[f"{generate.DOCS_DIR}/{generate.doc_file(BUCKET)}"]
    assert "## Connection Secret" not in bucket
