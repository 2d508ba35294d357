"""Asynchronous operations: accepting a mutation, settling it when due, serving and expiring it.

A mutation is accepted as a running operation record (H-29) whose effect is applied when its due
time comes (the `commitDelayMs` fault), each effect and its terminal record in one transaction.
Settlement due times are stored, so a restarted host settles what was due. Records stay
addressable after settlement until the retention expires (H-31, H-34).
"""

from __future__ import annotations

import copy
import json
import sqlite3
import time
import uuid
from dataclasses import dataclass
from typing import Any

from takoform_spec.host_api import ErrorCode, OperationState
from takoform_spec.identity import FormLine, FormRef

from .envelope import bump, generate_outputs, new_representation, timestamp
from .errors import HostError
from .forms import InstalledForms
from .misbehaviours import Settings
from .storage import Store, dumps, row_ref


@dataclass(frozen=True)
class OperationRecord:
    """An operation record as stored: its id, whether it is running, its exact JSON bytes."""

    id: str
    running: bool
    body: bytes


class Operations:
    def __init__(self, store: Store, forms: InstalledForms, settings: Settings) -> None:
        self.store, self.forms, self.settings = store, forms, settings

    def on(self, misbehaviour: str) -> bool:
        return self.settings.on(misbehaviour)

    # -- accepting ---------------------------------------------------------------------------

    def accept(
        self,
        verb: str,
        *,
        space: str,
        ref: FormRef,
        name: str,
        uid: str,
        result_generation: str | None,
        payload: dict[str, Any],
        key: str | None,
        fingerprint: str,
    ) -> OperationRecord:
        """Record a running operation for a mutation that passed every check."""
        faults = self.settings.faults
        op_id = "op-" + uuid.uuid4().hex
        now = time.time()
        fail = faults.failNextOperations > 0
        record = {
            "id": op_id,
            "verb": verb,
            "state": OperationState.RUNNING,
            "space": space,
            "name": name,
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
        with self.store.tx():
            if self.on("visible-before-commit") and not fail:
                self.apply(verb, space, ref, name, payload)
                applied = True
            self.store.insert_operation(
                op_id,
                verb,
                space,
                ref,
                name,
                uid,
                due_at=now + faults.commitDelayMs / 1000.0,
                key=key,
                fingerprint=fingerprint,
                payload=payload,
                record=text,
                applied=applied,
                fail=fail,
            )
        if fail:
            faults.failNextOperations -= 1
        return OperationRecord(op_id, True, text.encode("utf-8"))

    # -- settlement --------------------------------------------------------------------------

    def settle_due(self) -> int:
        """Commit every running operation whose due time has come; expire old records."""
        settled = 0
        if not self.settings.faults.stuckOperations:
            rows = self.store.due(time.time())
            if rows:
                # All due operations commit in one transaction: each one's effect and terminal
                # record are still atomic together, and a burst costs one fsync, not one each.
                with self.store.tx():
                    for row in rows:
                        self._settle(row)
                        settled += 1
        self.expire_retained()
        return settled

    def _settle(self, row: sqlite3.Row) -> None:
        verb = row["verb"]
        ref = row_ref(row)
        payload = json.loads(row["payload"])
        error: dict[str, str] | None = None
        with self.store.tx():
            if row["fail"]:
                error = {
                    "code": ErrorCode.PROVISIONING_FAILED,
                    "message": f"the host could not {verb} {ref.kind} {row['name']} "
                    "(injected failure)",
                }
                if verb == "create" and self.on("failed-create-leaves-resource"):
                    self.apply(verb, row["space"], ref, row["name"], payload)
            elif not row["applied"]:
                error = self.apply(verb, row["space"], ref, row["name"], payload)
            record = json.loads(row["record"])
            now = time.time()
            record["state"] = OperationState.FAILED if error else OperationState.SUCCEEDED
            if verb == "create":
                record["resourceUid"] = payload["uid"]
            record["error"] = error
            record["settledAt"] = timestamp(now)
            if self.on("forget-settled-operations"):
                self.store.delete_operation(row["seq"])
            else:
                self.store.settle_operation(row["seq"], record["state"], now, dumps(record))

    def apply(
        self, verb: str, space: str, ref: FormRef, name: str, payload: dict[str, Any]
    ) -> dict[str, str] | None:
        """Make an operation's effect inside the caller's transaction; return an error or None."""
        store = self.store
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
            store.write_resource(space, ref, name, payload["uid"], doc)
            return None
        res = store.resource(space, ref.line, name)
        if verb == "delete":
            if res is None:
                return None
            if res.uid != payload["uid"]:
                return _changed_out_of_band(name, payload["uid"], res.uid)
            store.delete_resource(space, ref.line, name, res.uid)
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
        status["outputs"] = generate_outputs(
            self.forms.definition(ref), space, name, uid, spec, previous=status.get("outputs")
        )
        store.write_resource(space, ref, name, uid, doc)
        return None

    # -- records -----------------------------------------------------------------------------

    def served(self, row: sqlite3.Row) -> OperationRecord:
        """A stored record as served: byte for byte, unless a misbehaviour says otherwise."""
        text = row["record"]
        running = row["state"] == OperationState.RUNNING
        if not running and self.on("unstable-terminal-body"):
            record = json.loads(text)
            record["servedAt"] = timestamp(precision="microseconds")
            text = dumps(record)
        return OperationRecord(row["id"], running, text.encode("utf-8"))

    def get(self, op_id: str) -> OperationRecord:
        row = self.store.operation(op_id)
        if row is None:
            raise HostError(
                ErrorCode.OPERATION_NOT_FOUND,
                f"operation {op_id!r} is unknown or expired",
                {"operationId": op_id},
            )
        return self.served(row)

    def list(self, filters: dict[str, str]) -> list[OperationRecord]:
        return [self.served(row) for row in self.store.operations(filters)]

    # -- expiry ------------------------------------------------------------------------------

    def expire_retained(self) -> None:
        rows = self.store.settled(
            before=time.time() - self.settings.faults.operationRetentionSeconds
        )
        if rows:
            with self.store.tx():
                for row in rows:
                    self.expire(row)

    def expire(self, row: sqlite3.Row) -> None:
        """Forget one settled record (inside the caller's transaction)."""
        self.store.delete_operation(row["seq"])
        if self.on("expiry-deletes-resource"):
            line = FormLine(row["api_version"], row["kind"])
            res = self.store.resource(row["space"], line, row["name"])
            if res is not None and res.uid == row["resource_uid"]:
                self.store.delete_resource(row["space"], line, row["name"], res.uid)


def _changed_out_of_band(name: str, expected: str, current: str | None) -> dict[str, str]:
    now = "is gone" if current is None else f"now has uid {current}"
    return {
        "code": ErrorCode.PROVISIONING_FAILED,
        "message": f"resource {name!r} changed out of band: expected uid {expected}, it {now}",
    }
