"""The admin API's actions: switches, faults, record expiry, out-of-band changes, packages.

None of this is part of the host API of docs/host-api.md: it is how tests and the conformance
suite's own tests provoke what a real host does on its own (expiry, a delete+recreate behind the
client's back, a package switch). See docs/reference-host.md.
"""

from __future__ import annotations

import copy
import logging
import uuid
from typing import Any

from takoform_spec.host_api import CONDITION_TYPES, PORTABLE_REASONS, ErrorCode, OperationState
from takoform_spec.identity import FormLine

from .envelope import bump, new_representation, rotate_sensitive_outputs, timestamp
from .errors import HostError
from .misbehaviours import (
    MISBEHAVIOURS,
    InvalidFaults,
    UnknownMisbehaviour,
    check_misbehaviours,
)
from .rules import Host
from .storage import Resource

log = logging.getLogger("takoform_host")


class Admin:
    def __init__(self, host: Host) -> None:
        self.host = host
        self.store = host.store

    # -- switches and faults -----------------------------------------------------------------

    def misbehaviours(self) -> dict[str, Any]:
        return {
            "enabled": sorted(self.host.settings.misbehaviours),
            "available": [
                {"name": name, "breaks": rule, "description": what}
                for name, (rule, what) in MISBEHAVIOURS.items()
            ],
        }

    def set_misbehaviours(self, body: Any) -> dict[str, Any]:
        names = body.get("enabled") if isinstance(body, dict) else None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise HostError(ErrorCode.INVALID_REQUEST, 'body must be {"enabled": ["name", ...]}')
        try:
            enabled = check_misbehaviours(names)
        except UnknownMisbehaviour as exc:
            raise HostError(ErrorCode.INVALID_REQUEST, str(exc)) from None
        self.host.settings.misbehaviours = set(enabled)
        log.info("misbehaviours now %s", sorted(enabled) or "none")
        return self.misbehaviours()

    def faults(self) -> dict[str, Any]:
        return self.host.faults.to_json()

    def merge_faults(self, body: Any) -> dict[str, Any]:
        try:
            self.host.faults.merge(body)
        except InvalidFaults as exc:
            raise HostError(ErrorCode.INVALID_REQUEST, str(exc)) from None
        log.info("faults now %s", self.host.faults.to_json())
        return self.faults()

    # -- operation records -------------------------------------------------------------------

    def expire(self, body: Any) -> dict[str, list[str]]:
        """Expire settled records now (H-34 allows expiry only after settlement)."""
        body = {} if body is None else body
        ids = body.get("ids") if isinstance(body, dict) else None
        if not isinstance(body, dict) or (
            ids is not None
            and (not isinstance(ids, list) or not all(isinstance(i, str) for i in ids))
        ):
            raise HostError(
                ErrorCode.INVALID_REQUEST, 'body must be {"ids": ["op-...", ...]} or {}'
            )
        if ids is None:
            rows = self.store.settled()
            running: list[str] = []
            unknown: list[str] = []
        else:
            found = self.store.operations_by_id(ids)
            rows = [row for row in found.values() if row["state"] != OperationState.RUNNING]
            running = [i for i in ids if i in found and found[i]["state"] == OperationState.RUNNING]
            unknown = [i for i in ids if i not in found]
        with self.store.tx():
            for row in rows:
                self.host.operations.expire(row)
        return {"expired": [row["id"] for row in rows], "running": running, "unknown": unknown}

    # -- out-of-band resource changes --------------------------------------------------------

    @staticmethod
    def _target(body: Any) -> tuple[str, FormLine, str]:
        if not isinstance(body, dict):
            raise HostError(ErrorCode.INVALID_REQUEST, "body must be an object")
        missing = [
            k for k in ("space", "apiVersion", "kind", "name") if not isinstance(body.get(k), str)
        ]
        if missing:
            raise HostError(ErrorCode.INVALID_REQUEST, f"missing or non-string member(s) {missing}")
        return body["space"], FormLine(body["apiVersion"], body["kind"]), body["name"]

    def _resource(self, space: str, line: FormLine, name: str) -> Resource:
        res = self.store.resource(space, line, name)
        if res is None:
            raise HostError(
                ErrorCode.RESOURCE_NOT_FOUND, f"no resource {name!r} of {line} in {space!r}"
            )
        return res

    def recreate(self, body: Any) -> dict[str, Any]:
        """Delete and recreate a resource behind the client's back: same spec, new uid."""
        space, line, name = self._target(body)
        res = self._resource(space, line, name)
        uid = str(uuid.uuid4())
        doc = new_representation(
            definition=self.host.forms.definition(res.ref),
            space=space,
            name=name,
            uid=uid,
            spec=res.doc["spec"],
            package_digest=self.host.forms.active_package(res.ref),
            creation_key=None,
        )
        with self.store.tx():
            self.store.delete_resource(space, line, name, res.uid)
            self.store.write_resource(space, res.ref, name, uid, doc)
        return doc

    def set_conditions(self, body: Any) -> dict[str, Any]:
        """Set a resource's own conditions (and observedGeneration) behind the client's back:
        what a real host reports when the resource degrades or lags. Bumps the revision."""
        space, line, name = self._target(body)
        conditions = _checked_conditions(body.get("conditions", []))
        observed = body.get("observedGeneration")
        res = self._resource(space, line, name)
        doc = copy.deepcopy(res.doc)
        meta, status = doc["metadata"], doc["status"]
        if observed is not None:
            if not (isinstance(observed, str) and observed.isdigit() and observed[0] != "0"):
                raise HostError(
                    ErrorCode.INVALID_REQUEST, "observedGeneration must be a decimal string"
                )
            if int(observed) > int(meta["generation"]):
                raise HostError(
                    ErrorCode.INVALID_REQUEST,
                    f"observedGeneration {observed} is beyond generation {meta['generation']}",
                )
            status["observedGeneration"] = observed
        now = timestamp()
        current = {c["type"]: c for c in status["conditions"]}
        for change in conditions:
            old = current.get(change["type"])
            kept = old is not None and old.get("status") == change["status"]
            since = old.get("lastTransitionTime", now) if old is not None and kept else now
            current[change["type"]] = {**change, "lastTransitionTime": since}
        status["conditions"] = list(current.values())
        meta["revision"] = bump(meta["revision"])
        with self.store.tx():
            self.store.write_resource(space, res.ref, name, res.uid, doc)
        return doc

    def rotate_secrets(self, body: Any) -> dict[str, Any]:
        """New values for a resource's sensitive outputs (a credential rotation on the host's
        side): a representation change, so the revision moves and the generation does not."""
        space, line, name = self._target(body)
        res = self._resource(space, line, name)
        definition = self.host.forms.definition(res.ref)
        if not definition.sensitive_outputs:
            raise HostError(
                ErrorCode.INVALID_REQUEST, f"{res.ref} declares no sensitive output to rotate"
            )
        doc = copy.deepcopy(res.doc)
        doc["status"]["outputs"] = rotate_sensitive_outputs(
            definition, doc["status"].get("outputs") or {}, doc["spec"], name
        )
        doc["metadata"]["revision"] = bump(doc["metadata"]["revision"])
        with self.store.tx():
            self.store.write_resource(space, res.ref, name, res.uid, doc)
        log.info("rotated the sensitive outputs of %s %s/%s", line, space, name)
        return {"rotated": [o.name for o in definition.sensitive_outputs], "uid": res.uid}

    def delete(self, body: Any) -> dict[str, Any]:
        space, line, name = self._target(body)
        res = self._resource(space, line, name)
        with self.store.tx():
            self.store.delete_resource(space, line, name, res.uid)
        return {"deleted": True, "uid": res.uid}

    # -- packages ----------------------------------------------------------------------------

    def activate(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict) or not isinstance(body.get("formRef"), dict):
            raise HostError(
                ErrorCode.INVALID_REQUEST, 'body must be {"formRef": {...}, "packageDigest": ...}'
            )
        doc = body["formRef"]
        key = tuple(
            str(doc.get(k)) for k in ("apiVersion", "kind", "definitionVersion", "schemaDigest")
        )
        forms = self.host.forms
        ref = forms.lookup(key)  # type: ignore[arg-type]
        if ref is None:
            raise HostError(ErrorCode.FORM_UNKNOWN, f"FormRef {doc} is not installed")
        digest = body.get("packageDigest")
        if digest not in forms.package_digests(ref):
            raise HostError(
                ErrorCode.INVALID_REQUEST,
                f"package {digest!r} is not installed for that FormRef",
                {"packageDigests": forms.package_digests(ref)},
            )
        forms.activate(ref, digest)
        with self.store.tx():
            self.store.save_active_package(ref, digest)
        return self.host.forms.item(ref)


def _checked_conditions(doc: Any) -> list[dict[str, str]]:
    """Conditions as H-17 allows them: closed types and portable reasons, all strings."""
    if not isinstance(doc, list):
        raise HostError(ErrorCode.INVALID_REQUEST, "conditions must be a list")
    checked = []
    for item in doc:
        if not isinstance(item, dict) or item.get("type") not in CONDITION_TYPES:
            raise HostError(
                ErrorCode.INVALID_REQUEST, f"each condition needs a type of {CONDITION_TYPES}"
            )
        if item.get("status") not in ("True", "False", "Unknown"):
            raise HostError(ErrorCode.INVALID_REQUEST, "status must be True, False or Unknown")
        if item.get("reason") not in PORTABLE_REASONS:
            raise HostError(
                ErrorCode.INVALID_REQUEST, f"reason must be one of {PORTABLE_REASONS} (H-17)"
            )
        extra = set(item) - {"type", "status", "reason", "message", "hostReason"}
        if extra or not all(isinstance(v, str) for v in item.values()):
            raise HostError(
                ErrorCode.INVALID_REQUEST,
                "a condition has type, status, reason, message, hostReason",
            )
        checked.append(
            {
                "type": item["type"],
                "status": item["status"],
                "reason": item["reason"],
                "message": item.get("message", ""),
                "hostReason": item.get("hostReason", ""),
            }
        )
    return checked
