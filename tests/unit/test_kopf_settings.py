"""The kopf settings the operator runs with: kopf keeps no per-event bookkeeping we never read."""

from __future__ import annotations

import json

import kopf
from kopf._cogs.structs import bodies, diffs

from takoform_operator.main import kopf_settings


def _body() -> bodies.Body:
    spec = {"space": "team-a", "parameters": {"region": "eu-west-1", "sizeGiB": 10}}
    return bodies.Body(
        {
            "apiVersion": "storage.takoform.io/v1",
            "kind": "Bucket",
            "metadata": {
                "name": "logs",
                "uid": "u-1",
                "generation": 3,
                # What kopf left on CRs in earlier releases of this operator.
                "annotations": {"takoform.io/last-handled-configuration": json.dumps({})},
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
            },
            "spec": spec,
        }
    )


def test_kopf_builds_no_diff_base_and_finds_no_difference() -> None:
    # kopf builds a diff-base (a deep copy of the whole body) for every watch event, for change
    # handlers the operator does not have: none is built, and none differs.
    storage = kopf_settings(None).persistence.diffbase_storage
    body = _body()
    old, new = storage.fetch(body=body), storage.build(body=body)
    assert new == {} and old == {}
    assert not diffs.diff(old, new)
    patch = kopf.Patch()
    storage.store(body=body, patch=patch, essence=new)
    assert not patch, "no annotation is written"
