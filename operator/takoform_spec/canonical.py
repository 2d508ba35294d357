"""Canonical JSON and the sha256 digest: the bytes every schemaDigest and fingerprint hashes.

The rules are written out in docs/schema-digest.md; tests/unit/test_known_answers.py pins them to
hex values computed outside this code.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any


def canonical_json(doc: Any) -> bytes:
    """The canonical serialisation: sorted keys, no insignificant whitespace, UTF-8."""
    return json.dumps(
        doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_digest(data: bytes) -> str:
    """`sha256:` and the lowercase hex SHA-256 of `data`."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def json_type(value: Any) -> str:
    """The JSON type of a decoded value, as a refusal names it (else its Python type's name)."""
    for kind, types in (
        ("null", type(None)),
        ("boolean", bool),
        ("integer", int),
        ("number", float),
        ("string", str),
        ("array", list),
        ("object", Mapping),
    ):
        if isinstance(value, types):
            return kind
    return type(value).__name__
