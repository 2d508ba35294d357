"""The reference rules of the host API: spaces, reads, mutations, fences, idempotency.

Every method runs synchronously on the event loop thread, so a check and the write it guards can
never interleave with another request. Every mutation is ONE SQLite transaction committed before
the HTTP answer is sent (H-35). A rule that fails raises `HostError` with a portable code of
docs/host-api.md section 9 (`ErrorCode`, which fixes the status); the HTTP encoding of answers
lives in `app.py`.
"""

from __future__ import annotations

import copy
import json
import logging
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from takoform_spec.canonical import canonical_json, sha256_digest
from takoform_spec.definitions import FormDefinition
from takoform_spec.host_api import ErrorCode
from takoform_spec.identity import FormLine, FormRef

from .envelope import bump, timestamp
from .errors import HostError
from .forms import InstalledForms, ref_key
from .misbehaviours import Faults, Settings
from .operations import OperationRecord, Operations
from .storage import Resource, Store
from .validation import checked_spec

log = logging.getLogger("takoform_host")


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
    """The host's resource API over its store, its installed Forms and its run-time settings."""

    def __init__(self, db_path: Path, forms: InstalledForms, settings: Settings) -> None:
        self.forms = forms
        self.settings = settings
        self.store = Store(db_path)
        self.operations = Operations(self.store, forms, settings)
        self._load_active_packages()

    def close(self) -> None:
        self.store.close()

    def on(self, misbehaviour: str) -> bool:
        return self.settings.on(misbehaviour)

    @property
    def faults(self) -> Faults:
        return self.settings.faults

    def _load_active_packages(self) -> None:
        for row in self.store.active_packages():
            key = (row["api_version"], row["kind"], row["definition_version"], row["schema_digest"])
            ref = self.forms.lookup(key)
            if ref is None or row["package_digest"] not in self.forms.package_digests(ref):
                log.warning("active package %s of %s is no longer installed", row[4], key)
                continue
            self.forms.activate(ref, row["package_digest"])

    # -- spaces ------------------------------------------------------------------------------

    def put_space(self, name: str) -> tuple[bool, dict[str, Any]]:
        row = self.store.space(name)
        if row is not None:
            return False, _space_doc(row)
        with self.store.tx():
            self.store.insert_space(name, timestamp())
        row = self.store.space(name)
        assert row is not None
        return True, _space_doc(row)

    def get_space(self, name: str) -> dict[str, Any]:
        row = self.store.space(name)
        if row is None:
            raise HostError(ErrorCode.SPACE_NOT_FOUND, f"space {name!r} does not exist")
        return _space_doc(row)

    def list_spaces(self) -> list[dict[str, Any]]:
        return [_space_doc(row) for row in self.store.spaces()]

    def delete_space(self, name: str) -> None:
        self.get_space(name)
        if self.store.space_holds_anything(name):
            raise HostError(
                ErrorCode.SPACE_NOT_EMPTY,
                f"space {name!r} still holds resources or running operations",
                {"space": name},
            )
        with self.store.tx():
            self.store.delete_space(name)

    def require_space(self, name: str) -> None:
        if self.store.space(name) is not None:
            return
        if self.on("auto-create-spaces"):
            self.put_space(name)
            return
        raise HostError(
            ErrorCode.SPACE_NOT_FOUND, f"space {name!r} does not exist", {"space": name}
        )

    # -- resources ---------------------------------------------------------------------------

    def find(self, space: str, ref: FormRef, name: str, loose: bool = False) -> Resource | None:
        """The resource bound to exactly `ref` (H-18), or None."""
        res = self.store.resource(space, ref.line, name)
        if res is None:
            return None
        if not loose and ref_key(res.ref) != ref_key(ref):
            return None
        if self.on("package-digest-in-identity"):
            active = self.forms.active_package(res.ref)
            if res.doc["metadata"].get("packageDigest") != active:
                return None
        return res

    def not_found(self, space: str, ref: FormRef, name: str) -> HostError:
        return HostError(
            ErrorCode.RESOURCE_NOT_FOUND,
            f"no resource {name!r} of {ref.api_version} {ref.kind} in space {space!r} under "
            f"definitionVersion {ref.definition_version} and schemaDigest {ref.schema_digest}",
            {"space": space, "name": name, "formRef": ref.to_json()},
        )

    def read(
        self, space: str, line: FormLine, name: str, version: str | None, digest: str | None
    ) -> Resource:
        self.require_space(space)
        ref, loose = self.forms.resolve(line, version, digest, self.settings)
        res = self.find(space, ref, name, loose)
        if res is None:
            raise self.not_found(space, ref, name)
        return res

    def list_resources(
        self, space: str, line: FormLine, version: str | None, digest: str | None
    ) -> list[dict[str, Any]]:
        self.require_space(space)
        ref, loose = self.forms.resolve(line, version, digest, self.settings)
        found = (self.find(space, ref, n, loose) for n in self.store.resource_names(space, line))
        return [res.doc for res in found if res is not None]

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
        with self.store.tx():
            self.store.write_resource(space, res.ref, name, res.uid, doc)
        return doc

    # -- mutations ---------------------------------------------------------------------------

    def mutate(self, m: Mutation) -> OperationRecord:
        bypass = False
        key = m.idempotency_key
        if key is not None and not self.on("drop-idempotency-key"):
            prior = self.store.latest_with_key(key)
            if prior is not None:
                if prior["fingerprint"] == m.fingerprint:
                    if not self.on("ignore-idempotency-key"):
                        return self.operations.served(prior)  # H-28: precedes every other check
                elif not self.on("accept-key-reuse"):
                    raise HostError(
                        ErrorCode.IDEMPOTENCY_KEY_REUSED,
                        f"Idempotency-Key {key!r} was used for a different request "
                        f"(operation {prior['id']})",
                        {"operationId": prior["id"]},
                    )
                bypass = True
        self.require_space(m.space)
        ref, loose = self.forms.resolve(
            m.line, m.definition_version, m.schema_digest, self.settings
        )
        if m.method == "DELETE":
            return self._delete(m, ref, loose, bypass)
        return self._put(m, ref, loose, bypass)

    def _refuse_if_running(self, space: str, line: FormLine, name: str) -> None:
        row = self.store.running_on(space, line, name)
        if row is not None:
            raise _in_progress(row["id"], row["verb"])

    def _put(self, m: Mutation, ref: FormRef, loose: bool, bypass: bool) -> OperationRecord:
        if m.if_none_match is not None and m.if_none_match.strip() != "*":
            raise HostError(ErrorCode.INVALID_REQUEST, 'If-None-Match supports only "*" (create)')
        creating = m.if_none_match is not None
        if creating and m.expected_generation is not None:
            raise HostError(
                ErrorCode.INVALID_REQUEST,
                "If-None-Match: * (create) and Takoform-Expected-Generation (update) "
                "exclude each other",
            )
        if not creating and m.expected_generation is None:
            if not self.on("ignore-if-none-match"):
                raise HostError(
                    ErrorCode.PRECONDITION_REQUIRED,
                    "a PUT needs If-None-Match: * (create) "
                    "or Takoform-Expected-Generation (update)",
                )
            creating = self.find(m.space, ref, m.name, loose) is None
        if creating:
            return self._create(m, ref, bypass)
        return self._update(m, ref, loose, bypass)

    def _create(self, m: Mutation, ref: FormRef, bypass: bool) -> OperationRecord:
        spec = checked_spec(self.forms.definition(ref), m.body, self.settings)
        running = self.store.running_on(m.space, ref.line, m.name)
        concurrent_ok = self.on("allow-concurrent-create")
        if (
            running is not None
            and not bypass
            and not (concurrent_ok and running["verb"] == "create")
        ):
            raise _in_progress(running["id"], running["verb"])
        existing = self.store.resource(m.space, ref.line, m.name)
        if existing is not None and not bypass and not self.on("ignore-if-none-match"):
            raise HostError(
                ErrorCode.RESOURCE_EXISTS,
                f"a resource {m.name!r} of {ref.api_version} {ref.kind} already exists in space "
                f"{m.space!r}",
                {"space": m.space, "name": m.name},
            )
        uid = str(uuid.uuid4())
        if self.on("reuse-uid-on-recreate"):
            uid = self.store.deleted_uid(m.space, ref.line, m.name) or uid
        payload = {
            "spec": spec,
            "uid": uid,
            "packageDigest": self.forms.active_package(ref),
            "key": self._recorded_key(m),
        }
        return self._accept("create", m, ref, uid, "1", payload)

    def _fences(self, m: Mutation, res: Resource) -> None:
        revision = f'"{res.revision}"'
        tags = [tag.strip() for tag in (m.if_match or "").split(",")]
        #: (code, what the message says the resource holds, expected, current, whether they
        #: disagree, the misbehaviour that ignores the fence)
        fences = (
            (
                ErrorCode.UID_MISMATCH,
                "the resource's uid is",
                m.expected_uid,
                res.uid,
                m.expected_uid != res.uid,
                "ignore-expected-uid",
            ),
            (
                ErrorCode.GENERATION_CONFLICT,
                "the resource is at generation",
                m.expected_generation,
                res.generation,
                m.expected_generation != res.generation,
                "ignore-generation-fence",
            ),
            (
                ErrorCode.REVISION_CONFLICT,
                "the resource is at revision",
                m.if_match,
                revision,
                "*" not in tags and revision not in tags,
                "ignore-if-match",
            ),
        )
        for code, holds, expected, current, broken, ignored_by in fences:
            if expected is not None and broken and not self.on(ignored_by):
                raise HostError(
                    code,
                    f"{holds} {current}, not {expected}",
                    {"expected": expected, "current": current},
                )

    def _update(self, m: Mutation, ref: FormRef, loose: bool, bypass: bool) -> OperationRecord:
        res = self.find(m.space, ref, m.name, loose)
        if res is None:
            raise self.not_found(m.space, ref, m.name)
        definition = self.forms.definition(res.ref)
        try:
            spec = checked_spec(definition, m.body, self.settings, current=res.doc["spec"])
        except HostError as exc:
            if exc.code == ErrorCode.VALIDATION_FAILED and self.on("echo-sensitive-outputs"):
                raise _echoing(exc, definition, res) from None
            raise
        if not bypass:
            self._refuse_if_running(m.space, res.ref.line, m.name)
            self._fences(m, res)
        changed = spec != res.doc["spec"] or self.on("bump-generation-on-status-change")
        result = bump(res.generation) if changed else res.generation
        payload = {"spec": spec, "uid": res.uid}
        return self._accept("update", m, res.ref, res.uid, result, payload)

    def _delete(self, m: Mutation, ref: FormRef, loose: bool, bypass: bool) -> OperationRecord:
        res = self.find(m.space, ref, m.name, loose)
        if res is None:
            raise self.not_found(m.space, ref, m.name)
        if not bypass:
            self._refuse_if_running(m.space, res.ref.line, m.name)
            self._fences(m, res)
        return self._accept("delete", m, res.ref, res.uid, None, {"uid": res.uid})

    def _recorded_key(self, m: Mutation) -> str | None:
        return None if self.on("drop-idempotency-key") else m.idempotency_key

    def _accept(
        self,
        verb: str,
        m: Mutation,
        ref: FormRef,
        uid: str,
        result_generation: str | None,
        payload: dict[str, Any],
    ) -> OperationRecord:
        return self.operations.accept(
            verb,
            space=m.space,
            ref=ref,
            name=m.name,
            uid=uid,
            result_generation=result_generation,
            payload=payload,
            key=self._recorded_key(m),
            fingerprint=m.fingerprint,
        )

    # -- settlement (delegated) --------------------------------------------------------------

    def settle_due(self) -> int:
        return self.operations.settle_due()


def _space_doc(row: Any) -> dict[str, Any]:
    return {"name": row["name"], "createdAt": row["created_at"]}


def _in_progress(op_id: str, verb: str) -> HostError:
    return HostError(
        ErrorCode.OPERATION_IN_PROGRESS,
        f"operation {op_id} ({verb}) on this resource is still running",
        {"operationId": op_id},
    )


def _echoing(exc: HostError, definition: FormDefinition, res: Resource) -> HostError:
    """echo-sensitive-outputs: the refusal with the resource's sensitive outputs in it (H-39)."""
    outputs = res.doc.get("status", {}).get("outputs", {})
    echoed = {o.name: outputs[o.name] for o in definition.sensitive_outputs if o.name in outputs}
    message = f"{exc.message} (current outputs: {json.dumps(echoed)})"
    return HostError(exc.code, message, {**exc.details, "outputs": echoed}, exc.headers)
