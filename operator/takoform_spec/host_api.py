"""The host API's closed sets of names (docs/host-api.md): error codes, states, condition types.

Pure values, no I/O. The operator, the reference host and the conformance suite take these names
from here and nowhere else; what each of them does with a name stays its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Final


class ErrorCode(StrEnum):
    """The closed set of error codes, in the order of docs/host-api.md section 9 (H-37)."""

    INVALID_REQUEST = "invalid_request"
    UNAUTHENTICATED = "unauthenticated"
    FORBIDDEN = "forbidden"
    SPACE_NOT_FOUND = "space_not_found"
    FORM_UNKNOWN = "form_unknown"
    RESOURCE_NOT_FOUND = "resource_not_found"
    OPERATION_NOT_FOUND = "operation_not_found"
    ROUTE_NOT_FOUND = "route_not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    OPERATION_IN_PROGRESS = "operation_in_progress"
    SPACE_NOT_EMPTY = "space_not_empty"
    RESOURCE_EXISTS = "resource_exists"
    GENERATION_CONFLICT = "generation_conflict"
    REVISION_CONFLICT = "revision_conflict"
    UID_MISMATCH = "uid_mismatch"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    VALIDATION_FAILED = "validation_failed"
    IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
    PRECONDITION_REQUIRED = "precondition_required"
    PROVISIONING_FAILED = "provisioning_failed"
    INTERNAL = "internal"
    UNAVAILABLE = "unavailable"


#: Each code's contract HTTP status (docs/host-api.md section 9); None: only failed operations'.
ERROR_STATUS: Final[Mapping[ErrorCode, int | None]] = MappingProxyType(
    {
        ErrorCode.INVALID_REQUEST: 400,
        ErrorCode.UNAUTHENTICATED: 401,
        ErrorCode.FORBIDDEN: 403,
        ErrorCode.SPACE_NOT_FOUND: 404,
        ErrorCode.FORM_UNKNOWN: 404,
        ErrorCode.RESOURCE_NOT_FOUND: 404,
        ErrorCode.OPERATION_NOT_FOUND: 404,
        ErrorCode.ROUTE_NOT_FOUND: 404,
        ErrorCode.METHOD_NOT_ALLOWED: 405,
        ErrorCode.OPERATION_IN_PROGRESS: 409,
        ErrorCode.SPACE_NOT_EMPTY: 409,
        ErrorCode.RESOURCE_EXISTS: 412,
        ErrorCode.GENERATION_CONFLICT: 412,
        ErrorCode.REVISION_CONFLICT: 412,
        ErrorCode.UID_MISMATCH: 412,
        ErrorCode.PAYLOAD_TOO_LARGE: 413,
        ErrorCode.UNSUPPORTED_MEDIA_TYPE: 415,
        ErrorCode.VALIDATION_FAILED: 422,
        ErrorCode.IDEMPOTENCY_KEY_REUSED: 422,
        ErrorCode.PRECONDITION_REQUIRED: 428,
        ErrorCode.PROVISIONING_FAILED: None,
        ErrorCode.INTERNAL: 500,
        ErrorCode.UNAVAILABLE: 503,
    }
)


class OperationState(StrEnum):
    """The states of an operation record (docs/host-api.md section 7, H-31)."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


#: The closed set of condition types of a resource's status (docs/host-api.md section 4, H-17).
CONDITION_TYPES: Final[tuple[str, ...]] = (
    "Ready",
    "Reconciling",
    "Degraded",
    "Drifted",
    "Blocked",
    "Deleting",
)

#: The portable reasons of a condition (docs/host-api.md section 4, H-17; others go to hostReason).
PORTABLE_REASONS: Final[tuple[str, ...]] = (
    "Available",
    "Provisioning",
    "Updating",
    "Deleting",
    "Failed",
    "DriftDetected",
    "Observed",
)
