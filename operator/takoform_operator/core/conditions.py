"""Kubernetes-style conditions of the closed set, and their merge (pure; time is passed in)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .limits import condition_message


class ConditionType(StrEnum):
    READY = "Ready"
    RECONCILING = "Reconciling"
    DEGRADED = "Degraded"
    DRIFTED = "Drifted"
    BLOCKED = "Blocked"
    #: kstatus's abnormal-true condition for "progress stopped, a human must act": True exactly
    #: when Blocked is, with its reason and message, so generic readers (`kubectl wait`,
    #: cli-utils, Flux without healthCheckExprs) stop waiting on a Blocked CR.
    STALLED = "Stalled"
    DELETING = "Deleting"


class Reason(StrEnum):
    """Every reason the operator writes. CamelCase, fixed, matched by alerts and tests."""

    AVAILABLE = "Available"
    CREATE_PENDING = "CreatePending"
    UPDATE_PENDING = "UpdatePending"
    DELETE_PENDING = "DeletePending"
    OPERATION_RUNNING = "OperationRunning"
    IMPORTED = "Imported"
    IMPORT_TARGET_NOT_FOUND = "ImportTargetNotFound"
    IMPORT_REFUSED = "ImportRefused"
    INVALID_IMPORT_ID = "InvalidImportId"
    UID_MISMATCH = "UidMismatch"
    FORM_REF_UNSUPPORTED = "FormRefUnsupported"
    PIN_UNSUPPORTED = "PinUnsupported"
    NO_DEFAULT_CREATE = "NoDefaultCreate"
    NAME_TAKEN = "NameTaken"
    NAME_BUSY = "NameBusy"
    OWNERSHIP_UNPROVABLE = "OwnershipUnprovable"
    RESOURCE_DELETED = "ResourceDeleted"
    SPEC_DRIFT = "SpecDrift"
    OPERATION_FAILED = "OperationFailed"
    INVALID_SPEC = "InvalidSpec"
    #: A spec value nested deeper than the operator reads (core.depth): not read, not sent.
    NESTED_TOO_DEEP = "NestedTooDeep"
    HOST_STATE_UNDECODABLE = "HostStateUndecodable"
    HOST_REJECTED = "HostRejected"
    HOST_UNAVAILABLE = "HostUnavailable"
    #: The host resource's own conditions (docs/operator.md, "Ready"): its Degraded is True,
    #: its Ready is False, or its observedGeneration lags the generation we last wrote.
    HOST_DEGRADED = "HostDegraded"
    HOST_NOT_READY = "HostNotReady"
    HOST_RECONCILING = "HostReconciling"
    STATE_UNREADABLE = "StateUnreadable"
    DELETING = "Deleting"
    SPACE_MISMATCH = "SpaceMismatch"
    NAME_MISMATCH = "NameMismatch"
    ALREADY_MANAGED = "AlreadyManaged"
    #: An Event: a Lost binding taken over by the CR of the same namespace and name.
    REBOUND = "Rebound"
    IMPORTED_RESOURCE_GONE = "ImportedResourceGone"
    IDENTITY_CHANGED = "IdentityChanged"
    SPACE_NOT_GRANTED = "SpaceNotGranted"
    HOST_NOT_FOUND = "HostNotFound"
    #: The operator may not write the CR's connection Secret (its Secret rights are not bound
    #: in the CR's namespace, docs/tenancy.md).
    CONNECTION_SECRET_FORBIDDEN = "ConnectionSecretForbidden"
    # core.policy: a paused CR, and what Observe reports instead of a mutation.
    PAUSED = "Paused"
    RESUMED = "Resumed"
    OBSERVED_RESOURCE_MISSING = "ObservedResourceMissing"


_C = ConditionType
#: Every reason a condition can carry True, with the condition types it is written on; Ready False
#: repeats the reason of the condition that made it so, whatever that is, and so does every
#: condition that is no longer True (merge_conditions): a False condition says what is true now.
#: Reasons absent here (Resumed) name Events only. docs/operator.md "Conditions and reasons"
#: shows this table, and tests/unit/test_conditions_doc.py holds the two equal.
REASON_CONDITIONS: Mapping[Reason, frozenset[ConditionType]] = {
    reason: frozenset(kinds)
    for kinds, reasons in (
        ({_C.READY}, (Reason.AVAILABLE,)),
        (
            {_C.RECONCILING},
            (
                Reason.CREATE_PENDING,
                Reason.UPDATE_PENDING,
                Reason.DELETE_PENDING,
                Reason.OPERATION_RUNNING,
                Reason.IMPORTED,
                Reason.NAME_BUSY,
                Reason.HOST_NOT_READY,
                Reason.HOST_RECONCILING,
            ),
        ),
        ({_C.RECONCILING, _C.DELETING}, (Reason.PAUSED,)),
        (
            {_C.BLOCKED, _C.STALLED},
            (
                Reason.SPACE_NOT_GRANTED,
                Reason.HOST_NOT_FOUND,
                Reason.UID_MISMATCH,
                Reason.ALREADY_MANAGED,
                Reason.IMPORTED_RESOURCE_GONE,
                Reason.IDENTITY_CHANGED,
                Reason.FORM_REF_UNSUPPORTED,
                Reason.PIN_UNSUPPORTED,
                Reason.NO_DEFAULT_CREATE,
                Reason.NAME_TAKEN,
                Reason.OWNERSHIP_UNPROVABLE,
                Reason.IMPORT_REFUSED,
                Reason.STATE_UNREADABLE,
            ),
        ),
        (
            {_C.DEGRADED},
            (
                Reason.OPERATION_FAILED,
                Reason.INVALID_SPEC,
                Reason.NESTED_TOO_DEEP,
                Reason.INVALID_IMPORT_ID,
                Reason.IMPORT_TARGET_NOT_FOUND,
                Reason.OBSERVED_RESOURCE_MISSING,
                Reason.SPACE_MISMATCH,
                Reason.NAME_MISMATCH,
                Reason.HOST_REJECTED,
                Reason.HOST_UNAVAILABLE,
                Reason.HOST_STATE_UNDECODABLE,
                Reason.HOST_DEGRADED,
                Reason.CONNECTION_SECRET_FORBIDDEN,
            ),
        ),
        ({_C.DRIFTED}, (Reason.SPEC_DRIFT, Reason.RESOURCE_DELETED)),
        ({_C.DELETING}, (Reason.DELETING,)),
    )
    for reason in reasons
}


@dataclass(frozen=True)
class Condition:
    type: ConditionType
    status: bool
    reason: Reason
    message: str = ""

    def __post_init__(self) -> None:
        # Every message is cut to the cap here, where each condition is made: the CRD bounds a
        # condition message, and a status write refused for its length would show nothing.
        object.__setattr__(self, "message", condition_message(self.message))
        # The closed table above, enforced where every condition is made: a reason written on
        # the wrong condition would mislead alerts, the plugin and the docs alike. A False
        # condition repeats the reason Ready carries, whatever made it so.
        if not self.status:
            return
        if self.type not in REASON_CONDITIONS.get(self.reason, frozenset()):
            raise ValueError(f"reason {self.reason} is not written on condition {self.type}")


def merge_conditions(
    previous: object,
    current: Iterable[Condition],
    *,
    now: str,
    observed_generation: int,
    keep_unnamed: bool = False,
) -> list[dict[str, Any]]:
    """The new conditions list. lastTransitionTime moves only when the status flips; types not
    in `current` are reported False, so nothing lingers True, with the reason Ready carries now
    (`Available`, or what keeps it from being Ready): a False condition's reason is true now,
    never the one it had while it was True.
    With `keep_unnamed` (nothing was observed: a paused CR, or a host that could not be asked,
    so the last known Ready is still the best answer) they keep their last value as is.
    A condition that reported a pause and is not named again is dropped: the pause is over.
    `previous` is the status as found: what the operator could not have written is dropped."""
    before = _written(previous)
    given = {c.type: c for c in current}
    ready = given.get(ConditionType.READY)
    merged: list[dict[str, Any]] = []
    for kind in ConditionType:
        new = given.get(kind)
        old = before.get(str(kind))
        if new is None:
            if old is None:
                continue
            if keep_unnamed:
                merged.append(dict(old))
                continue
            if old.get("reason") == Reason.PAUSED:
                continue
            # No longer asserted: it turns False with what is true now. Every outcome that is not
            # kept whole names Ready; without it, nothing new is known and the reason stays.
            now_true = ready.reason if ready is not None else old.get("reason")
            status, reason, message = "False", str(now_true or ""), ""
        else:
            status = "True" if new.status else "False"
            reason, message = str(new.reason), new.message
        if old is not None and old.get("status") == status:
            since = old.get("lastTransitionTime", now)
            if new is None and reason == old.get("reason"):
                message = condition_message(str(old.get("message") or ""))
        else:
            since = now
        merged.append(
            {
                "type": str(kind),
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": since,
                "observedGeneration": observed_generation,
            }
        )
    return merged


def transitions(previous: object, merged: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Conditions that turned True, turned False, or stayed True for another reason: each
    becomes a Kubernetes Event. A False condition whose reason follows Ready's is no news."""
    before = _written(previous)
    changed = []
    for condition in merged:
        old = before.get(condition["type"])
        if condition["status"] == "False":
            if old is not None and old.get("status") == "True":
                changed.append(condition)
        elif old is None or (old.get("status"), old.get("reason")) != ("True", condition["reason"]):
            changed.append(condition)
    return changed


def _written(previous: object) -> dict[str, Mapping[str, Any]]:
    """The previous conditions by type, those the operator could have written: of the closed
    set, True with a reason the table allows on the type or False with any reason of the set.
    Anything else in a status (edited by hand, restored from an old backup, an older release's
    reason) is neither kept nor turned False with its reason: it would carry a condition outside
    the set into the next write."""
    if not isinstance(previous, list | tuple):
        return {}
    written: dict[str, Mapping[str, Any]] = {}
    for condition in previous:
        if not isinstance(condition, Mapping) or condition.get("status") not in ("True", "False"):
            continue
        try:
            kind, reason = ConditionType(condition["type"]), Reason(condition["reason"])
            Condition(kind, condition["status"] == "True", reason)
        except (KeyError, TypeError, ValueError):
            continue
        written[str(kind)] = condition
    return written
