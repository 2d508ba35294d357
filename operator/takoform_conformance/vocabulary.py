"""What docs/host-api.md fixes and the suite holds a host to: paths, error codes, closed sets."""

from __future__ import annotations

import re

from takoform_spec import identity

API = "/v1alpha3"
ADMIN = "/admin/v1"

#: Section 9 of docs/host-api.md: the closed set of error codes and their HTTP status
#: (None: only ever carried by a failed operation record).
ERROR_CODES: dict[str, int | None] = {
    "invalid_request": 400,
    "unauthenticated": 401,
    "forbidden": 403,
    "space_not_found": 404,
    "form_unknown": 404,
    "resource_not_found": 404,
    "operation_not_found": 404,
    "route_not_found": 404,
    "method_not_allowed": 405,
    "operation_in_progress": 409,
    "space_not_empty": 409,
    "resource_exists": 412,
    "generation_conflict": 412,
    "revision_conflict": 412,
    "uid_mismatch": 412,
    "payload_too_large": 413,
    "unsupported_media_type": 415,
    "validation_failed": 422,
    "idempotency_key_reused": 422,
    "precondition_required": 428,
    "provisioning_failed": None,
    "internal": 500,
    "unavailable": 503,
}
CONDITION_TYPES = frozenset(identity.CONDITION_TYPES)
CONDITION_REASONS = frozenset(
    {"Available", "Provisioning", "Updating", "Deleting", "Failed", "DriftDetected", "Observed"}
)
OPERATION_STATES = frozenset({"running", "succeeded", "failed"})
DECIMAL = re.compile(r"^(0|[1-9][0-9]*)$")
