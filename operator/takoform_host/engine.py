"""The host's state machine over SQLite: spaces, resources, operations, fences, idempotency.

Every method runs synchronously on the event loop thread, so a check and the write it guards can
never interleave with another request. Every mutation is ONE SQLite transaction (WAL,
`synchronous=FULL`), committed before the HTTP answer is sent: an acknowledged mutation survives
`kill -9` (H-35). Settlement due times are stored, so a restarted host settles what was due.

HTTP concerns (status lines, headers, encodings) live in `app.py`; this module raises `HostError`
with the status and portable error code of docs/host-api.md section 9.
"""

from __future__ import annotations

import copy
import json
import logging
import re
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from takoform_spec.canonical import canonical_json, sha256_digest
from takoform_spec.identity import FormLine, FormRef

from .envelope import bump, generate_outputs, new_representation, timestamp
from .forms import InstalledForms, ref_key
from .misbehaviours import Faults
from .validation import InvalidSpec, validate_spec

log = logging.getLogger("takoform_host")

_DECIMAL = re.compile(r"^(0|[1-9][0-9]*)$")

SCHEMA = """
CREATE TABLE IF NOT EXISTS spaces (
    name TEXT PRIMARY KEY,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS resources (
    space TEXT NOT NULL,
    api_version TEXT NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    definition_version TEXT NOT NULL,
    schema_digest TEXT NOT NULL,
    uid TEXT NOT NULL,
    doc TEXT NOT NULL,
    PRIMARY KEY (space, api_version, kind, name)
);
CREATE TABLE IF NOT EXISTS operations (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    verb TEXT NOT NULL,
    state TEXT NOT NULL,
    space TEXT NOT NULL,
    api_version TEXT NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    definition_version TEXT NOT NULL,
    schema_digest TEXT NOT NULL,
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


class HostError(Exception):
    """An error answer: HTTP status, a code of the closed set (section 9), details."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.details = details or {}
        self.headers = headers or {}


def dumps(doc: Any) -> str:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


@dataclass
class Settings:
    """Run-time switches; the admin API changes them (they are not persisted)."""

    misbehaviours: set[str] = field(default_factory=set)
    faults: Faults = field(default_factory=Faults)


@dataclass(frozen=True)
class Resource:
    ref: FormRef
    uid: str
    doc: dict[str, Any]

    @property
    def generation(self) -> str:
        return str(self.doc["metadata"]["generation"])

    @property
    def revision(self) -> str:
        return str(self.doc["metadata"]["revision"])


@dataclass(frozen=True)
class Mutation:
    """One resource mutation request as the HTTP layer parsed it."""

    method: str  # PUT or DELETE
    space: str
    line: FormLine
    name: str
    definition_version: str | None
    schema_digest: str | None
    body: Any
    if_none_match: str | None
    if_match: str | None
    expected_generation: str | None
    expected_uid: str | None
    idempotency_key: str | None
    fingerprint: str


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    headers: dict[str, str]


def fingerprint(
    method: str, path: str, query: dict[str, str | None], fences: dict[str, str | None], body: Any
) -> str:
    """The request fingerprint of H-28: method, path + FormRef query, fences, canonical body."""
    return sha256_digest(
        canonical_json(
            {"method": method, "path": path, "query": query, "fences": fences, "body": body}
        )
    )


class Host:
    def __init__(self, db_path: Path, forms: InstalledForms, settings: Settings) -> None:
        self.forms = forms
        self.settings = settings
        self.db = sqlite3.connect(str(db_path), isolation_level=None, check_same_thread=False)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("PRAGMA busy_timeout=5000")
        self.db.executescript(SCHEMA)
        self._load_active_packages()

    def close(self) -> None:
        self.db.close()

    # -- plumbing ----------------------------------------------------------------------------

    def on(self, misbehaviour: str) -> bool:
        return misbehaviour in self.settings.misbehaviours

    @property
    def faults(self) -> Faults:
        return self.settings.faults

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

    def _load_active_packages(self) -> None:
        for row in self.db.execute("SELECT * FROM active_packages"):
            key = (row["api_version"], row["kind"], row["definition_version"], row["schema_digest"])
            ref = self.forms.lookup(key)
            if ref is None or row["package_digest"] not in self.forms.package_digests(ref):
                log.warning("active package %s of %s is no longer installed", row[4], key)
                continue
            self.forms.activate(ref, row["package_digest"])

    # -- spaces ------------------------------------------------------------------------------

    def _space_row(self, name: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self.db.execute(
            "SELECT * FROM spaces WHERE name = ?", (name,)
        ).fetchone()
        return row

    @staticmethod
    def _space_doc(row: sqlite3.Row) -> dict[str, Any]:
        return {"name": row["name"], "createdAt": row["created_at"]}

    def put_space(self, name: str) -> tuple[bool, dict[str, Any]]:
        row = self._space_row(name)
        if row is not None:
            return False, self._space_doc(row)
        with self.tx():
            self.db.execute("INSERT INTO spaces VALUES (?, ?)", (name, timestamp()))
        row = self._space_row(name)
        assert row is not None
        return True, self._space_doc(row)

    def get_space(self, name: str) -> dict[str, Any]:
        row = self._space_row(name)
        if row is None:
            raise HostError(404, "space_not_found", f"space {name!r} does not exist")
        return self._space_doc(row)

    def list_spaces(self) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT * FROM spaces ORDER BY name").fetchall()
        return [self._space_doc(row) for row in rows]

    def delete_space(self, name: str) -> None:
        self.get_space(name)
        held = self.db.execute(
            "SELECT (SELECT COUNT(*) FROM resources WHERE space = ?)"
            " + (SELECT COUNT(*) FROM operations WHERE space = ? AND state = 'running')",
            (name, name),
        ).fetchone()[0]
        if held:
            raise HostError(
                409,
                "space_not_empty",
                f"space {name!r} still holds resources or running operations",
                {"space": name},
            )
        with self.tx():
            self.db.execute("DELETE FROM spaces WHERE name = ?", (name,))

    def require_space(self, name: str) -> None:
        if self._space_row(name) is not None:
            return
        if self.on("auto-create-spaces"):
            self.put_space(name)
            return
        raise HostError(404, "space_not_found", f"space {name!r} does not exist", {"space": name})

    # -- Forms -------------------------------------------------------------------------------

    def resolve(
        self, line: FormLine, version: str | None, digest: str | None
    ) -> tuple[FormRef, bool]:
        """The installed FormRef a request names, and whether lookups may ignore the binding.

        Fails closed (H-8): anything but an installed exact FormRef is `form_unknown`.
        """
        if not version or not digest:
            newest = self.forms.newest_of_line(line)
            if self.on("default-missing-formref") and newest is not None:
                return newest, False
            raise HostError(
                400,
                "invalid_request",
                "the query parameters definitionVersion and schemaDigest are both required",
                {
                    "missing": [
                        n
                        for n, v in (("definitionVersion", version), ("schemaDigest", digest))
                        if not v
                    ]
                },
            )
        ref = self.forms.lookup((line.api_version, line.kind, version, digest))
        if ref is not None:
            return ref, self.on("serve-under-any-installed-ref")
        newest = self.forms.newest_of_line(line)
        if self.on("match-group-kind") and newest is not None:
            return newest, True
        raise HostError(
            404,
            "form_unknown",
            f"FormRef {line.api_version} {line.kind} definitionVersion={version} "
            f"schemaDigest={digest} is not installed on this host",
            {
                "formRef": {
                    "apiVersion": line.api_version,
                    "kind": line.kind,
                    "definitionVersion": version,
                    "schemaDigest": digest,
                },
                "installed": [ref.to_json() for ref in self.forms.refs_of_line(line)],
            },
        )

    # -- resources ---------------------------------------------------------------------------

    def _resource_row(self, space: str, line: FormLine, name: str) -> Resource | None:
        row = self.db.execute(
            "SELECT * FROM resources WHERE space = ? AND api_version = ? AND kind = ? AND name = ?",
            (space, line.api_version, line.kind, name),
        ).fetchone()
        if row is None:
            return None
        ref = FormRef(
            row["api_version"], row["kind"], row["definition_version"], row["schema_digest"]
        )
        return Resource(ref, row["uid"], json.loads(row["doc"]))

    def find(self, space: str, ref: FormRef, name: str, loose: bool = False) -> Resource | None:
        """The resource bound to exactly `ref` (H-18), or None."""
        res = self._resource_row(space, ref.line, name)
        if res is None:
            return None
        if not loose and ref_key(res.ref) != ref_key(ref):
            return None
        if self.on("package-digest-in-identity"):
            active = self.forms.active_package(res.ref)
            if res.doc["metadata"].get("packageDigest") != active:
                return None
        return res

    def _not_found(self, space: str, ref: FormRef, name: str) -> HostError:
        return HostError(
            404,
            "resource_not_found",
            f"no resource {name!r} of {ref.api_version} {ref.kind} in space {space!r} under "
            f"definitionVersion {ref.definition_version} and schemaDigest {ref.schema_digest}",
            {"space": space, "name": name, "formRef": ref.to_json()},
        )

    def read(
        self, space: str, line: FormLine, name: str, version: str | None, digest: str | None
    ) -> Resource:
        self.require_space(space)
        ref, loose = self.resolve(line, version, digest)
        res = self.find(space, ref, name, loose)
        if res is None:
            raise self._not_found(space, ref, name)
        return res

    def list_resources(
        self, space: str, line: FormLine, version: str | None, digest: str | None
    ) -> list[dict[str, Any]]:
        self.require_space(space)
        ref, loose = self.resolve(line, version, digest)
        rows = self.db.execute(
            "SELECT name FROM resources WHERE space = ? AND api_version = ? AND kind = ? "
            "ORDER BY name",
            (space, line.api_version, line.kind),
        ).fetchall()
        found = (self.find(space, ref, row["name"], loose) for row in rows)
        return [self.present(res.doc) for res in found if res is not None]

    def present(self, doc: dict[str, Any]) -> dict[str, Any]:
        """The representation as served (serve-time misbehaviours applied to a copy)."""
        if self.on("host-internal-condition-reason"):
            doc = copy.deepcopy(doc)
            for condition in doc["status"]["conditions"]:
                condition["reason"] = "HOST_OK_42"
        return doc

    def etag(self, doc: dict[str, Any]) -> str:
        tag = f'"{doc["metadata"]["revision"]}"'
        return "W/" + tag if self.on("weak-etag") else tag

    def observe(
        self, space: str, line: FormLine, name: str, version: str | None, digest: str | None
    ) -> dict[str, Any]:
        res = self.read(space, line, name, version, digest)
        doc = copy.deepcopy(res.doc)
        status = doc["status"]
        now = timestamp(precision="microseconds")
        if now == status.get("observedTime"):
            time.sleep(0.000002)
            now = timestamp(precision="microseconds")
        status["observedTime"] = now
        for condition in status["conditions"]:
            if condition["type"] == "Ready":
                condition["message"] = f"{res.ref.kind} {name} observed at {now}"
                condition["hostReason"] = "Observed"
        meta = doc["metadata"]
        if self.on("bump-generation-on-status-change"):
            meta["generation"] = bump(meta["generation"])
            status["observedGeneration"] = meta["generation"]
        if not self.on("static-revision-on-status-change"):
            meta["revision"] = bump(meta["revision"])
        with self.tx():
            self._write_resource(space, res.ref, name, res.uid, doc)
        return doc

    def _write_resource(
        self, space: str, ref: FormRef, name: str, uid: str, doc: dict[str, Any]
    ) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO resources VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                space,
                ref.api_version,
                ref.kind,
                name,
                ref.definition_version,
                ref.schema_digest,
                uid,
                dumps(doc),
            ),
        )

    def _delete_resource(self, space: str, line: FormLine, name: str, uid: str) -> None:
        self.db.execute(
            "DELETE FROM resources WHERE space = ? AND api_version = ? AND kind = ? AND name = ?",
            (space, line.api_version, line.kind, name),
        )
        self.db.execute(
            "INSERT OR REPLACE INTO deleted_uids VALUES (?, ?, ?, ?, ?)",
            (space, line.api_version, line.kind, name, uid),
        )

    # -- validation (H-22, H-27) -------------------------------------------------------------

    def validate(
        self, ref: FormRef, body: Any, current: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise HostError(
                400, "invalid_request", 'the body must be the JSON object {"spec": {...}}'
            )
        for member in body:
            if member != "spec":
                raise HostError(
                    422,
                    "validation_failed",
                    f'body member {member!r} is not allowed; the body is {{"spec": {{...}}}}',
                    {"field": member, "formRef": ref.to_json()},
                )
        if "spec" not in body:
            raise HostError(
                422,
                "validation_failed",
                "the body has no spec",
                {"field": "spec", "formRef": ref.to_json()},
            )
        spec = body["spec"]
        definition = self.forms.definition(ref)
        if self.on("store-undeclared-fields"):
            if not isinstance(spec, dict):
                raise HostError(
                    422, "validation_failed", "spec must be an object", {"field": "spec"}
                )
            encoded = dict(spec)
        else:
            try:
                encoded = validate_spec(definition, spec)
            except InvalidSpec as exc:
                raise HostError(
                    422,
                    "validation_failed",
                    str(exc),
                    {"field": exc.field, "formRef": ref.to_json()},
                ) from None
        if not self.on("ignore-defaults"):
            for spec_field in definition.fields:
                if spec_field.name not in encoded and spec_field.default is not None:
                    encoded[spec_field.name] = copy.deepcopy(spec_field.default)
        if current is not None and not self.on("store-undeclared-fields"):
            for spec_field in definition.fields:
                if spec_field.immutable and encoded.get(spec_field.name) != current.get(
                    spec_field.name
                ):
                    raise HostError(
                        422,
                        "validation_failed",
                        f"field {spec_field.name!r} is immutable: it cannot change after creation "
                        f"(current {current.get(spec_field.name)!r})",
                        {"field": spec_field.name, "formRef": ref.to_json()},
                    )
        return encoded

    # -- mutations ---------------------------------------------------------------------------

    def mutate(self, m: Mutation) -> Reply:
        bypass = False
        key = m.idempotency_key
        if key is not None and not self.on("drop-idempotency-key"):
            prior = self.db.execute(
                "SELECT * FROM operations WHERE idempotency_key = ? ORDER BY seq DESC LIMIT 1",
                (key,),
            ).fetchone()
            if prior is not None:
                if prior["fingerprint"] == m.fingerprint:
                    if not self.on("ignore-idempotency-key"):
                        return self.serve_operation(prior)  # H-28: precedes every other check
                elif not self.on("accept-key-reuse"):
                    raise HostError(
                        422,
                        "idempotency_key_reused",
                        f"Idempotency-Key {key!r} was used for a different request "
                        f"(operation {prior['id']})",
                        {"operationId": prior["id"]},
                    )
                bypass = True
        self.require_space(m.space)
        ref, loose = self.resolve(m.line, m.definition_version, m.schema_digest)
        if m.method == "DELETE":
            return self._delete(m, ref, loose, bypass)
        return self._put(m, ref, loose, bypass)

    def _running(self, space: str, line: FormLine, name: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self.db.execute(
            "SELECT id, verb FROM operations WHERE space = ? AND api_version = ? AND kind = ? "
            "AND name = ? AND state = 'running' ORDER BY seq DESC LIMIT 1",
            (space, line.api_version, line.kind, name),
        ).fetchone()
        return row

    @staticmethod
    def _in_progress(row: sqlite3.Row) -> HostError:
        return HostError(
            409,
            "operation_in_progress",
            f"operation {row['id']} ({row['verb']}) on this resource is still running",
            {"operationId": row["id"]},
        )

    def _put(self, m: Mutation, ref: FormRef, loose: bool, bypass: bool) -> Reply:
        if m.if_none_match is not None and m.if_none_match.strip() != "*":
            raise HostError(400, "invalid_request", 'If-None-Match supports only "*" (create)')
        creating = m.if_none_match is not None
        if creating and m.expected_generation is not None:
            raise HostError(
                400,
                "invalid_request",
                "If-None-Match: * (create) and Takoform-Expected-Generation (update) "
                "exclude each other",
            )
        if not creating and m.expected_generation is None:
            if not self.on("ignore-if-none-match"):
                raise HostError(
                    428,
                    "precondition_required",
                    "a PUT needs If-None-Match: * (create) "
                    "or Takoform-Expected-Generation (update)",
                )
            creating = self.find(m.space, ref, m.name, loose) is None
        if creating:
            return self._create(m, ref, bypass)
        return self._update(m, ref, loose, bypass)

    def _create(self, m: Mutation, ref: FormRef, bypass: bool) -> Reply:
        spec = self.validate(ref, m.body)
        running = self._running(m.space, ref.line, m.name)
        concurrent_ok = self.on("allow-concurrent-create")
        if (
            running is not None
            and not bypass
            and not (concurrent_ok and running["verb"] == "create")
        ):
            raise self._in_progress(running)
        existing = self._resource_row(m.space, ref.line, m.name)
        if existing is not None and not bypass and not self.on("ignore-if-none-match"):
            raise HostError(
                412,
                "resource_exists",
                f"a resource {m.name!r} of {ref.api_version} {ref.kind} already exists in space "
                f"{m.space!r}",
                {"space": m.space, "name": m.name},
            )
        uid = str(uuid.uuid4())
        if self.on("reuse-uid-on-recreate"):
            row = self.db.execute(
                "SELECT uid FROM deleted_uids"
                " WHERE space = ? AND api_version = ? AND kind = ? AND name = ?",
                (m.space, ref.api_version, ref.kind, m.name),
            ).fetchone()
            if row is not None:
                uid = row["uid"]
        key = None if self.on("drop-idempotency-key") else m.idempotency_key
        payload = {
            "spec": spec,
            "uid": uid,
            "packageDigest": self.forms.active_package(ref),
            "key": key,
        }
        return self._accept("create", m, ref, uid, "1", payload)

    def _fences(self, m: Mutation, res: Resource) -> None:
        if (
            m.expected_uid is not None
            and m.expected_uid != res.uid
            and not self.on("ignore-expected-uid")
        ):
            raise HostError(
                412,
                "uid_mismatch",
                f"the resource's uid is {res.uid}, not {m.expected_uid}",
                {"expected": m.expected_uid, "current": res.uid},
            )
        if (
            m.expected_generation is not None
            and m.expected_generation != res.generation
            and not self.on("ignore-generation-fence")
        ):
            raise HostError(
                412,
                "generation_conflict",
                f"the resource is at generation {res.generation}, not {m.expected_generation}",
                {"expected": m.expected_generation, "current": res.generation},
            )
        if m.if_match is not None and not self.on("ignore-if-match"):
            current = f'"{res.revision}"'
            tags = [tag.strip() for tag in m.if_match.split(",")]
            if "*" not in tags and current not in tags:
                raise HostError(
                    412,
                    "revision_conflict",
                    f"the resource is at revision {current}, not {m.if_match}",
                    {"expected": m.if_match, "current": current},
                )

    def _update(self, m: Mutation, ref: FormRef, loose: bool, bypass: bool) -> Reply:
        res = self.find(m.space, ref, m.name, loose)
        if res is None:
            raise self._not_found(m.space, ref, m.name)
        spec = self.validate(res.ref, m.body, current=res.doc["spec"])
        if not bypass:
            running = self._running(m.space, res.ref.line, m.name)
            if running is not None:
                raise self._in_progress(running)
            self._fences(m, res)
        changed = spec != res.doc["spec"] or self.on("bump-generation-on-status-change")
        result = bump(res.generation) if changed else res.generation
        payload = {"spec": spec, "uid": res.uid}
        return self._accept("update", m, res.ref, res.uid, result, payload)

    def _delete(self, m: Mutation, ref: FormRef, loose: bool, bypass: bool) -> Reply:
        res = self.find(m.space, ref, m.name, loose)
        if res is None:
            raise self._not_found(m.space, ref, m.name)
        if not bypass:
            running = self._running(m.space, res.ref.line, m.name)
            if running is not None:
                raise self._in_progress(running)
            self._fences(m, res)
        return self._accept("delete", m, res.ref, res.uid, None, {"uid": res.uid})

    def _accept(
        self,
        verb: str,
        m: Mutation,
        ref: FormRef,
        uid: str,
        result_generation: str | None,
        payload: dict[str, Any],
    ) -> Reply:
        op_id = "op-" + uuid.uuid4().hex
        now = time.time()
        key = None if self.on("drop-idempotency-key") else m.idempotency_key
        fail = self.faults.failNextOperations > 0
        record = {
            "id": op_id,
            "verb": verb,
            "state": "running",
            "space": m.space,
            "name": m.name,
            "formRef": ref.to_json(),
            "resourceUid": None if verb == "create" and self.on("omit-result-uid") else uid,
            "resultGeneration": result_generation,
            "idempotencyKey": key,
            "error": None,
            "createdAt": timestamp(now),
            "settledAt": None,
        }
        text = dumps(record)
        applied = False
        with self.tx():
            if self.on("visible-before-commit") and not fail:
                self._apply(verb, m.space, ref, m.name, payload)
                applied = True
            self.db.execute(
                "INSERT INTO operations (id, verb, state, space, api_version, kind, name, "
                "definition_version, schema_digest, resource_uid, due_at, idempotency_key, "
                "fingerprint, payload, record, applied, fail) "
                "VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    op_id,
                    verb,
                    m.space,
                    ref.api_version,
                    ref.kind,
                    m.name,
                    ref.definition_version,
                    ref.schema_digest,
                    uid,
                    now + self.faults.commitDelayMs / 1000.0,
                    key,
                    m.fingerprint,
                    dumps(payload),
                    text,
                    int(applied),
                    int(fail),
                ),
            )
        if fail:
            self.faults.failNextOperations -= 1
        return Reply(202, text.encode("utf-8"), {"Location": f"/v1alpha3/operations/{op_id}"})

    # -- settlement --------------------------------------------------------------------------

    def settle_due(self) -> int:
        """Commit every running operation whose due time has come; expire old records."""
        settled = 0
        if not self.faults.stuckOperations:
            rows = self.db.execute(
                "SELECT * FROM operations WHERE state = 'running' AND due_at <= ? ORDER BY seq",
                (time.time(),),
            ).fetchall()
            if rows:
                # All due operations commit in one transaction: each one's effect and terminal
                # record are still atomic together, and a burst costs one fsync, not one each.
                with self.tx():
                    for row in rows:
                        self._settle(row)
                        settled += 1
        self.expire_retained()
        return settled

    def _settle(self, row: sqlite3.Row) -> None:
        verb = row["verb"]
        ref = FormRef(
            row["api_version"], row["kind"], row["definition_version"], row["schema_digest"]
        )
        payload = json.loads(row["payload"])
        error: dict[str, str] | None = None
        with self.tx():
            if row["fail"]:
                error = {
                    "code": "provisioning_failed",
                    "message": f"the host could not {verb} {ref.kind} {row['name']} "
                    "(injected failure)",
                }
                if verb == "create" and self.on("failed-create-leaves-resource"):
                    self._apply(verb, row["space"], ref, row["name"], payload)
            elif not row["applied"]:
                error = self._apply(verb, row["space"], ref, row["name"], payload)
            record = json.loads(row["record"])
            now = time.time()
            record["state"] = "failed" if error else "succeeded"
            if verb == "create":
                record["resourceUid"] = payload["uid"]
            record["error"] = error
            record["settledAt"] = timestamp(now)
            if self.on("forget-settled-operations"):
                self.db.execute("DELETE FROM operations WHERE seq = ?", (row["seq"],))
            else:
                self.db.execute(
                    "UPDATE operations SET state = ?, settled_at = ?, record = ? WHERE seq = ?",
                    (record["state"], now, dumps(record), row["seq"]),
                )

    def _apply(
        self, verb: str, space: str, ref: FormRef, name: str, payload: dict[str, Any]
    ) -> dict[str, str] | None:
        """Make an operation's effect inside the caller's transaction; return an error or None."""
        if verb == "create":
            doc = new_representation(
                definition=self.forms.definition(ref),
                space=space,
                name=name,
                uid=payload["uid"],
                spec=payload["spec"],
                package_digest=payload["packageDigest"],
                creation_key=payload["key"],
            )
            self._write_resource(space, ref, name, payload["uid"], doc)
            return None
        res = self._resource_row(space, ref.line, name)
        if verb == "delete":
            if res is None:
                return None
            if res.uid != payload["uid"]:
                return _changed_out_of_band(name, payload["uid"], res.uid)
            self._delete_resource(space, ref.line, name, res.uid)
            return None
        if res is None or res.uid != payload["uid"]:
            return _changed_out_of_band(name, payload["uid"], res.uid if res else None)
        doc = copy.deepcopy(res.doc)
        spec = payload["spec"]
        changed = spec != doc["spec"]
        if not changed and not self.on("bump-generation-on-status-change"):
            return None  # a no-op update changes nothing (H-14, H-15)
        meta, status = doc["metadata"], doc["status"]
        meta["generation"] = bump(meta["generation"])
        meta["revision"] = bump(meta["revision"])
        uid = res.uid
        if changed and self.on("unstable-uid"):
            uid = meta["uid"] = str(uuid.uuid4())
        doc["spec"] = spec
        now = timestamp()
        status["observedGeneration"] = meta["generation"]
        status["observedTime"] = timestamp(precision="microseconds")
        for condition in status["conditions"]:
            if condition["type"] == "Ready":
                condition["message"] = (
                    f"{ref.kind} {name} is available at generation {meta['generation']}"
                )
                condition["hostReason"] = "Updated"
                if condition["status"] != "True":
                    condition["status"], condition["lastTransitionTime"] = "True", now
        status["outputs"] = generate_outputs(self.forms.definition(ref), space, name, uid, spec)
        self._write_resource(space, ref, name, uid, doc)
        return None

    # -- operation records -------------------------------------------------------------------

    def serve_operation(self, row: sqlite3.Row) -> Reply:
        headers = {"Location": f"/v1alpha3/operations/{row['id']}"}
        if row["state"] == "running":
            return Reply(202, row["record"].encode("utf-8"), headers)
        text = row["record"]
        if self.on("unstable-terminal-body"):
            record = json.loads(text)
            record["servedAt"] = timestamp(precision="microseconds")
            text = dumps(record)
        return Reply(200, text.encode("utf-8"), headers)

    def get_operation(self, op_id: str) -> tuple[int, bytes]:
        row = self.db.execute("SELECT * FROM operations WHERE id = ?", (op_id,)).fetchone()
        if row is None:
            raise HostError(
                404,
                "operation_not_found",
                f"operation {op_id!r} is unknown or expired",
                {"operationId": op_id},
            )
        reply = self.serve_operation(row)
        return 200, reply.body

    def list_operations(self, filters: dict[str, str]) -> bytes:
        columns = {"space": "space", "apiVersion": "api_version", "kind": "kind", "name": "name"}
        where = " AND ".join(f"{columns[k]} = ?" for k in filters) or "1"
        rows = self.db.execute(
            f"SELECT * FROM operations WHERE {where} ORDER BY seq DESC",
            tuple(filters.values()),
        ).fetchall()
        items = [self.serve_operation(row).body for row in rows]
        return b'{"items":[' + b",".join(items) + b"]}"

    def expire_retained(self) -> None:
        cutoff = time.time() - self.faults.operationRetentionSeconds
        rows = self.db.execute(
            "SELECT * FROM operations WHERE state != 'running' AND settled_at <= ?", (cutoff,)
        ).fetchall()
        if rows:
            with self.tx():
                for row in rows:
                    self._expire_row(row)

    def _expire_row(self, row: sqlite3.Row) -> None:
        self.db.execute("DELETE FROM operations WHERE seq = ?", (row["seq"],))
        if self.on("expiry-deletes-resource"):
            line = FormLine(row["api_version"], row["kind"])
            res = self._resource_row(row["space"], line, row["name"])
            if res is not None and res.uid == row["resource_uid"]:
                self._delete_resource(row["space"], line, row["name"], res.uid)

    # -- admin -------------------------------------------------------------------------------

    def admin_expire(self, ids: list[str] | None) -> dict[str, list[str]]:
        """Expire settled records now (H-34 allows expiry only after settlement)."""
        if ids is None:
            rows = self.db.execute("SELECT * FROM operations WHERE state != 'running'").fetchall()
            running: list[str] = []
            unknown: list[str] = []
        else:
            found = {
                row["id"]: row
                for row in self.db.execute(
                    f"SELECT * FROM operations WHERE id IN ({','.join('?' * len(ids))})",
                    tuple(ids),
                )
            }
            rows = [row for row in found.values() if row["state"] != "running"]
            running = [i for i in ids if i in found and found[i]["state"] == "running"]
            unknown = [i for i in ids if i not in found]
        with self.tx():
            for row in rows:
                self._expire_row(row)
        return {"expired": [row["id"] for row in rows], "running": running, "unknown": unknown}

    def admin_target(self, body: Any) -> tuple[str, FormLine, str]:
        if not isinstance(body, dict):
            raise HostError(400, "invalid_request", "body must be an object")
        missing = [
            k for k in ("space", "apiVersion", "kind", "name") if not isinstance(body.get(k), str)
        ]
        if missing:
            raise HostError(400, "invalid_request", f"missing or non-string member(s) {missing}")
        return body["space"], FormLine(body["apiVersion"], body["kind"]), body["name"]

    def admin_recreate(self, body: Any) -> dict[str, Any]:
        space, line, name = self.admin_target(body)
        res = self._resource_row(space, line, name)
        if res is None:
            raise HostError(
                404, "resource_not_found", f"no resource {name!r} of {line} in {space!r}"
            )
        uid = str(uuid.uuid4())
        doc = new_representation(
            definition=self.forms.definition(res.ref),
            space=space,
            name=name,
            uid=uid,
            spec=res.doc["spec"],
            package_digest=self.forms.active_package(res.ref),
            creation_key=None,
        )
        with self.tx():
            self._delete_resource(space, line, name, res.uid)
            self._write_resource(space, res.ref, name, uid, doc)
        return doc

    def admin_delete(self, body: Any) -> dict[str, Any]:
        space, line, name = self.admin_target(body)
        res = self._resource_row(space, line, name)
        if res is None:
            raise HostError(
                404, "resource_not_found", f"no resource {name!r} of {line} in {space!r}"
            )
        with self.tx():
            self._delete_resource(space, line, name, res.uid)
        return {"deleted": True, "uid": res.uid}

    def admin_activate(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict) or not isinstance(body.get("formRef"), dict):
            raise HostError(
                400, "invalid_request", 'body must be {"formRef": {...}, "packageDigest": ...}'
            )
        doc = body["formRef"]
        key = tuple(
            str(doc.get(k)) for k in ("apiVersion", "kind", "definitionVersion", "schemaDigest")
        )
        ref = self.forms.lookup(key)  # type: ignore[arg-type]
        if ref is None:
            raise HostError(404, "form_unknown", f"FormRef {doc} is not installed")
        digest = body.get("packageDigest")
        if digest not in self.forms.package_digests(ref):
            raise HostError(
                400,
                "invalid_request",
                f"package {digest!r} is not installed for that FormRef",
                {"packageDigests": self.forms.package_digests(ref)},
            )
        self.forms.activate(ref, digest)
        with self.tx():
            self.db.execute(
                "INSERT OR REPLACE INTO active_packages VALUES (?, ?, ?, ?, ?)",
                (*ref_key(ref), digest),
            )
        return self.form_item(ref)

    def form_item(self, ref: FormRef) -> dict[str, Any]:
        return {
            "formRef": ref.to_json(),
            "packageDigests": self.forms.package_digests(ref),
            "activePackageDigest": self.forms.active_package(ref),
        }


def _changed_out_of_band(name: str, expected: str, current: str | None) -> dict[str, str]:
    now = "is gone" if current is None else f"now has uid {current}"
    return {
        "code": "provisioning_failed",
        "message": f"resource {name!r} changed out of band: expected uid {expected}, it {now}",
    }


def canonical_decimal(value: str) -> bool:
    return bool(_DECIMAL.match(value))
