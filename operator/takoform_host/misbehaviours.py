"""Misbehaviour switches and fault controls of the reference host, and their run-time settings.

Each misbehaviour breaks exactly the rule of docs/host-api.md it names, so the conformance check
that proves that rule can be seen to fail. The names are an interface: the conformance suite's
tests switch them on by name. A switch is read where the rule it breaks is applied
(`settings.on(name)` in rules.py, operations.py, app.py); what a switch changes in a served
document is written here.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

#: name -> (H-rules it breaks, what the host then does)
MISBEHAVIOURS: dict[str, tuple[str, str]] = {
    "accept-any-token": ("H-3", "any bearer token, or none, is accepted on the host API"),
    "plain-text-errors": ("H-2", "errors are answered as text/plain instead of the JSON body"),
    "lenient-content-type": (
        "H-1",
        "a body is parsed as JSON whatever its Content-Type, and stored",
    ),
    "auto-create-spaces": ("H-6", "a resource request naming an unknown space creates it"),
    "default-missing-formref": (
        "H-7",
        "a missing definitionVersion/schemaDigest means the newest installed definition",
    ),
    "match-group-kind": (
        "H-8",
        "an unknown definitionVersion/schemaDigest is answered by matching group and kind",
    ),
    "serve-wrong-schema": (
        "H-9",
        "a definition read returns the schema with one field description altered",
    ),
    "package-digest-in-identity": (
        "H-10",
        "resources are keyed by the package digest active at creation: after a package switch "
        "they read as resource_not_found",
    ),
    "unstable-uid": ("H-12", "every committed update assigns a new uid"),
    "reuse-uid-on-recreate": (
        "H-13",
        "a create for a name that existed before reuses the last deleted uid of that name",
    ),
    "bump-generation-on-status-change": (
        "H-14",
        "observe and no-op updates bump metadata.generation",
    ),
    "static-revision-on-status-change": (
        "H-15, H-19",
        "observe changes status but not metadata.revision",
    ),
    "weak-etag": ("H-16", 'the ETag is weak: W/"<revision>"'),
    "host-internal-condition-reason": (
        "H-17",
        "the Ready condition's reason is a host-internal code (HOST_OK_42)",
    ),
    "serve-under-any-installed-ref": (
        "H-18",
        "a resource is visible under any installed FormRef of its line",
    ),
    "visible-before-commit": (
        "H-20, H-36",
        "creates, updates and deletes are visible at once although their operation still runs",
    ),
    "ignore-if-none-match": (
        "H-21",
        "a create over an existing name replaces it; a PUT without a fence creates or updates",
    ),
    "store-undeclared-fields": (
        "H-22",
        "specs are not validated: undeclared fields are stored, wrong types accepted",
    ),
    "ignore-generation-fence": ("H-23", "Takoform-Expected-Generation is not checked"),
    "ignore-if-match": ("H-24", "If-Match is not checked"),
    "ignore-expected-uid": ("H-25", "Takoform-Expected-Uid is not checked"),
    "allow-concurrent-create": (
        "H-26",
        "a second create for a name whose create is running is accepted as another operation",
    ),
    "ignore-defaults": ("H-27", "declared defaults of omitted optional fields are not applied"),
    "ignore-idempotency-key": (
        "H-28",
        "a repeated Idempotency-Key with the same request makes a new operation",
    ),
    "accept-key-reuse": (
        "H-29",
        "a repeated Idempotency-Key with a different request makes a new operation",
    ),
    "drop-idempotency-key": (
        "H-30",
        "the Idempotency-Key is not recorded on the operation or the created resource",
    ),
    "omit-result-uid": ("H-31", "a running create's record has resourceUid null"),
    "failed-create-leaves-resource": (
        "H-32",
        "a create whose operation fails leaves the resource behind",
    ),
    "forget-settled-operations": (
        "H-33",
        "operation records vanish once settled (operation_not_found)",
    ),
    "unstable-terminal-body": (
        "H-33",
        "every read of a settled record returns a different body (a fresh servedAt member)",
    ),
    "expiry-deletes-resource": ("H-34", "expiring an operation record deletes its resource"),
    "unknown-error-codes": ("H-37", '404 errors carry the code "not_found_generic"'),
    # Answers a client must check rather than trust (a client that believed them would
    # re-point, unbind or leak): one entry each, applied where the answer is served.
    "serve-another-name": (
        "H-38",
        "representations name another resource: metadata.name gains the suffix -other",
    ),
    "serve-another-space": (
        "H-38",
        "representations name another space: metadata.space gains the suffix -other",
    ),
    "serve-malformed-formref": (
        "H-38",
        'representations carry definitionVersion "v<version>", which is not MAJOR.MINOR.PATCH',
    ),
    "misstatus-not-found": (
        "H-37",
        "resource_not_found is answered with status 410 instead of its contract status 404",
    ),
    "record-another-name": (
        "H-31",
        "operation records name another resource: name gains the suffix -other",
    ),
    "record-malformed-formref": (
        "H-31",
        'operation records carry definitionVersion "v<version>", which is not MAJOR.MINOR.PATCH',
    ),
    "echo-sensitive-outputs": (
        "H-39",
        "a validation_failed answer to an update echoes the resource's sensitive outputs in its "
        "message and details",
    ),
    "oversized-errors": ("H-40", "every error message is padded past 4 MiB"),
}


class UnknownMisbehaviour(ValueError):
    pass


def check_misbehaviours(names: list[str] | tuple[str, ...]) -> frozenset[str]:
    unknown = sorted(set(names) - set(MISBEHAVIOURS))
    if unknown:
        raise UnknownMisbehaviour(
            f"unknown misbehaviour(s) {', '.join(unknown)}; available: {', '.join(MISBEHAVIOURS)}"
        )
    return frozenset(names)


class InvalidFaults(ValueError):
    pass


@dataclass
class Faults:
    """Fault controls (admin API `/admin/v1/faults`). All default to a healthy host."""

    latencyMs: int = 0
    errorRate: float = 0.0
    dropRate: float = 0.0
    #: When > 0, every host API request is answered 429 with this Retry-After (seconds).
    throttleRetryAfterSeconds: int = 0
    #: When > 0, the host API takes at most this many requests per second (one second's worth
    #: at once) and answers 429 with Retry-After: 1 above it.
    rateLimitPerSecond: float = 0.0
    stuckOperations: bool = False
    failNextOperations: int = 0
    commitDelayMs: int = 200
    operationRetentionSeconds: float = 3600.0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def merge(self, changes: Any) -> None:
        """Apply a partial update after checking every member (all or nothing)."""
        if not isinstance(changes, dict):
            raise InvalidFaults("faults must be a JSON object")
        current = self.to_json()
        checked: dict[str, Any] = {}
        for key, value in changes.items():
            if key not in current:
                raise InvalidFaults(f"unknown fault {key!r}; known: {', '.join(current)}")
            checked[key] = _check_fault(key, value)
        for key, value in checked.items():
            setattr(self, key, value)


def _check_fault(key: str, value: Any) -> Any:
    if key == "stuckOperations":
        if not isinstance(value, bool):
            raise InvalidFaults("stuckOperations must be a boolean")
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidFaults(f"{key} must be a number")
    if value < 0:
        raise InvalidFaults(f"{key} must not be negative")
    if key in ("errorRate", "dropRate"):
        if value > 1:
            raise InvalidFaults(f"{key} is a fraction between 0 and 1")
        return float(value)
    if key in ("latencyMs", "failNextOperations", "commitDelayMs", "throttleRetryAfterSeconds"):
        if int(value) != value:
            raise InvalidFaults(f"{key} must be a whole number")
        return int(value)
    return float(value)


@dataclass
class Settings:
    """Run-time switches; the admin API changes them (they are not persisted)."""

    misbehaviours: set[str] = field(default_factory=set)
    faults: Faults = field(default_factory=Faults)

    def on(self, misbehaviour: str) -> bool:
        return misbehaviour in self.misbehaviours


#: The suffix the name-changing switches add, and the prefix that makes a version not semver.
OTHER_SUFFIX = "-other"
_NOT_SEMVER = "v"
#: How far oversized-errors pads a message: past the 4 MiB an answer may have (H-40).
OVERSIZED_PADDING = 4 * 1024 * 1024 + 1

_SERVE_TIME = (
    "host-internal-condition-reason",
    "serve-another-name",
    "serve-another-space",
    "serve-malformed-formref",
)


def served(doc: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """A representation as served: serve-time misbehaviours applied to a copy."""
    if not any(settings.on(name) for name in _SERVE_TIME):
        return doc
    doc = copy.deepcopy(doc)
    if settings.on("host-internal-condition-reason"):
        for condition in doc["status"]["conditions"]:
            condition["reason"] = "HOST_OK_42"
    if settings.on("serve-another-name"):
        doc["metadata"]["name"] += OTHER_SUFFIX
    if settings.on("serve-another-space"):
        doc["metadata"]["space"] += OTHER_SUFFIX
    if settings.on("serve-malformed-formref"):
        doc["formRef"]["definitionVersion"] = _NOT_SEMVER + doc["formRef"]["definitionVersion"]
    return doc


def served_record(body: bytes, settings: Settings) -> bytes:
    """An operation record as served (its stored bytes, H-33), serve-time misbehaviours applied."""
    renamed, malformed = settings.on("record-another-name"), settings.on("record-malformed-formref")
    if not (renamed or malformed):
        return body
    record = json.loads(body)
    if renamed:
        record["name"] += OTHER_SUFFIX
    if malformed:
        record["formRef"]["definitionVersion"] = (
            _NOT_SEMVER + record["formRef"]["definitionVersion"]
        )
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
