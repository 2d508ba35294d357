"""The host's durable storage: one SQLite database, its schema, and every query the rules need.

WAL with `synchronous=FULL`: a transaction committed before the HTTP answer is sent survives
`kill -9` (H-35). The store knows rows and JSON documents, not rules: which row to write when is
decided in `rules.py`, `operations.py` and `admin.py`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from takoform_spec.identity import FormLine, FormRef

#: The columns that place a resource and its exact FormRef (`_placed`), in resources and operations.
_PLACED_COLUMNS = (
    "space TEXT NOT NULL, api_version TEXT NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL, "
    "definition_version TEXT NOT NULL, schema_digest TEXT NOT NULL"
)
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS spaces (
    name TEXT PRIMARY KEY,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS resources (
    {_PLACED_COLUMNS},
    uid TEXT NOT NULL,
    doc TEXT NOT NULL,
    PRIMARY KEY (space, api_version, kind, name)
);
CREATE TABLE IF NOT EXISTS operations (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    verb TEXT NOT NULL,
    state TEXT NOT NULL,
    {_PLACED_COLUMNS},
    resource_uid TEXT,
    due_at REAL NOT NULL,
    settled_at REAL,
    idempotency_key TEXT,
    fingerprint TEXT NOT NULL,
    payload TEXT NOT NULL,
    record TEXT NOT NULL,
    applied INTEGER NOT NULL DEFAULT 0,
    fail INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS operations_due ON operations (state, due_at);
CREATE INDEX IF NOT EXISTS operations_settled ON operations (settled_at);
CREATE INDEX IF NOT EXISTS operations_key ON operations (idempotency_key);
CREATE INDEX IF NOT EXISTS operations_target ON operations (space, api_version, kind, name, state);
CREATE TABLE IF NOT EXISTS deleted_uids (
    space TEXT NOT NULL,
    api_version TEXT NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    uid TEXT NOT NULL,
    PRIMARY KEY (space, api_version, kind, name)
);
CREATE TABLE IF NOT EXISTS active_packages (
    api_version TEXT NOT NULL,
    kind TEXT NOT NULL,
    definition_version TEXT NOT NULL,
    schema_digest TEXT NOT NULL,
    package_digest TEXT NOT NULL,
    PRIMARY KEY (api_version, kind, definition_version, schema_digest)
);
"""

_TARGET = "space = ? AND api_version = ? AND kind = ? AND name = ?"


def dumps(doc: Any) -> str:
    """Compact JSON, as stored and served."""
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Resource:
    """A stored resource: the exact FormRef it is bound to, its uid, its representation."""

    ref: FormRef
    uid: str
    doc: dict[str, Any]

    @property
    def generation(self) -> str:
        return str(self.doc["metadata"]["generation"])

    @property
    def revision(self) -> str:
        return str(self.doc["metadata"]["revision"])


def _placed(space: str, ref: FormRef, name: str) -> tuple[str, str, str, str, str, str]:
    """The columns that place a resource and its exact FormRef, in the order of the resources
    and operations tables."""
    return space, ref.api_version, ref.kind, name, ref.definition_version, ref.schema_digest


def row_ref(row: sqlite3.Row) -> FormRef:
    return FormRef(row["api_version"], row["kind"], row["definition_version"], row["schema_digest"])


class Store:
    """The SQLite database of one host."""

    def __init__(self, db_path: Path) -> None:
        self.db = sqlite3.connect(str(db_path), isolation_level=None, check_same_thread=False)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("PRAGMA busy_timeout=5000")
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def tx(self) -> Iterator[None]:
        """One transaction; nested use joins the outer one (a settlement batch)."""
        if self.db.in_transaction:
            yield
            return
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    # -- spaces ------------------------------------------------------------------------------

    def space(self, name: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self.db.execute(
            "SELECT * FROM spaces WHERE name = ?", (name,)
        ).fetchone()
        return row

    def spaces(self) -> list[sqlite3.Row]:
        return self.db.execute("SELECT * FROM spaces ORDER BY name").fetchall()

    def insert_space(self, name: str, created_at: str) -> None:
        self.db.execute("INSERT INTO spaces VALUES (?, ?)", (name, created_at))

    def delete_space(self, name: str) -> None:
        self.db.execute("DELETE FROM spaces WHERE name = ?", (name,))

    def space_holds_anything(self, name: str) -> bool:
        """Whether the space still holds resources or running operations."""
        held = self.db.execute(
            "SELECT (SELECT COUNT(*) FROM resources WHERE space = ?)"
            " + (SELECT COUNT(*) FROM operations WHERE space = ? AND state = 'running')",
            (name, name),
        ).fetchone()[0]
        return bool(held)

    # -- resources ---------------------------------------------------------------------------

    def resource(self, space: str, line: FormLine, name: str) -> Resource | None:
        row = self.db.execute(
            f"SELECT * FROM resources WHERE {_TARGET}", (space, line.api_version, line.kind, name)
        ).fetchone()
        if row is None:
            return None
        return Resource(row_ref(row), row["uid"], json.loads(row["doc"]))

    def resource_names(self, space: str, line: FormLine) -> list[str]:
        rows = self.db.execute(
            "SELECT name FROM resources WHERE space = ? AND api_version = ? AND kind = ? "
            "ORDER BY name",
            (space, line.api_version, line.kind),
        ).fetchall()
        return [row["name"] for row in rows]

    def write_resource(
        self, space: str, ref: FormRef, name: str, uid: str, doc: dict[str, Any]
    ) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO resources VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (*_placed(space, ref, name), uid, dumps(doc)),
        )

    def delete_resource(self, space: str, line: FormLine, name: str, uid: str) -> None:
        """Delete the resource and remember its uid (what `reuse-uid-on-recreate` reuses)."""
        self.db.execute(
            f"DELETE FROM resources WHERE {_TARGET}", (space, line.api_version, line.kind, name)
        )
        self.db.execute(
            "INSERT OR REPLACE INTO deleted_uids VALUES (?, ?, ?, ?, ?)",
            (space, line.api_version, line.kind, name, uid),
        )

    def deleted_uid(self, space: str, line: FormLine, name: str) -> str | None:
        row = self.db.execute(
            f"SELECT uid FROM deleted_uids WHERE {_TARGET}",
            (space, line.api_version, line.kind, name),
        ).fetchone()
        return None if row is None else str(row["uid"])

    # -- operations --------------------------------------------------------------------------

    def operation(self, op_id: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self.db.execute(
            "SELECT * FROM operations WHERE id = ?", (op_id,)
        ).fetchone()
        return row

    def operations_by_id(self, ids: list[str]) -> dict[str, sqlite3.Row]:
        rows = self.db.execute(
            f"SELECT * FROM operations WHERE id IN ({','.join('?' * len(ids))})", tuple(ids)
        )
        return {row["id"]: row for row in rows}

    def latest_with_key(self, key: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self.db.execute(
            "SELECT * FROM operations WHERE idempotency_key = ? ORDER BY seq DESC LIMIT 1", (key,)
        ).fetchone()
        return row

    def running_on(self, space: str, line: FormLine, name: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self.db.execute(
            f"SELECT id, verb FROM operations WHERE {_TARGET} AND state = 'running' "
            "ORDER BY seq DESC LIMIT 1",
            (space, line.api_version, line.kind, name),
        ).fetchone()
        return row

    def operations(self, filters: dict[str, str]) -> list[sqlite3.Row]:
        """Newest first; `filters` maps space/apiVersion/kind/name to an exact value."""
        columns = {"space": "space", "apiVersion": "api_version", "kind": "kind", "name": "name"}
        where = " AND ".join(f"{columns[k]} = ?" for k in filters) or "1"
        return self.db.execute(
            f"SELECT * FROM operations WHERE {where} ORDER BY seq DESC", tuple(filters.values())
        ).fetchall()

    def due(self, now: float) -> list[sqlite3.Row]:
        return self.db.execute(
            "SELECT * FROM operations WHERE state = 'running' AND due_at <= ? ORDER BY seq", (now,)
        ).fetchall()

    def settled(self, before: float | None = None) -> list[sqlite3.Row]:
        """Settled records, all of them or those settled at or before `before`."""
        if before is None:
            return self.db.execute("SELECT * FROM operations WHERE state != 'running'").fetchall()
        return self.db.execute(
            "SELECT * FROM operations WHERE state != 'running' AND settled_at <= ?", (before,)
        ).fetchall()

    def insert_operation(
        self,
        op_id: str,
        verb: str,
        space: str,
        ref: FormRef,
        name: str,
        uid: str,
        due_at: float,
        key: str | None,
        fingerprint: str,
        payload: dict[str, Any],
        record: str,
        applied: bool,
        fail: bool,
    ) -> None:
        self.db.execute(
            "INSERT INTO operations (id, verb, state, space, api_version, kind, name, "
            "definition_version, schema_digest, resource_uid, due_at, idempotency_key, "
            "fingerprint, payload, record, applied, fail) "
            "VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                op_id,
                verb,
                *_placed(space, ref, name),
                uid,
                due_at,
                key,
                fingerprint,
                dumps(payload),
                record,
                int(applied),
                int(fail),
            ),
        )

    def settle_operation(self, seq: int, state: str, settled_at: float, record: str) -> None:
        self.db.execute(
            "UPDATE operations SET state = ?, settled_at = ?, record = ? WHERE seq = ?",
            (state, settled_at, record, seq),
        )

    def delete_operation(self, seq: int) -> None:
        self.db.execute("DELETE FROM operations WHERE seq = ?", (seq,))

    # -- packages ----------------------------------------------------------------------------

    def active_packages(self) -> list[sqlite3.Row]:
        return self.db.execute("SELECT * FROM active_packages").fetchall()

    def save_active_package(self, ref: FormRef, digest: str) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO active_packages VALUES (?, ?, ?, ?, ?)",
            (ref.api_version, ref.kind, ref.definition_version, ref.schema_digest, digest),
        )
