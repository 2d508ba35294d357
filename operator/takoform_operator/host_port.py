"""The host as the reconcile service needs it: the HostPort protocol and the errors it raises.

Implementations (takoform_operator.host_client) translate HTTP answers into this tree once
(docs/host-api.md section 9):

    HostError
    ├── HostUnavailable          transport failure, 429 or 5xx: retryable (retry_after honoured)
    ├── HostProtocolError        an answer outside the contract (not JSON, unknown code, wrong ref)
    └── HostRejected             a 4xx with a contract error body: not retryable as is
        ├── Unauthenticated / Forbidden
        ├── InvalidRequest / ValidationFailed (.field) / PayloadTooLarge / UnsupportedMediaType
        ├── NotFound
        │   ├── SpaceNotFound
        │   ├── FormUnknown
        │   ├── ResourceNotFound
        │   └── OperationNotFound
        ├── OperationInProgress (.operation_id)
        ├── IdempotencyKeyReused (.operation_id)
        └── PreconditionFailed
            ├── ResourceExists
            ├── GenerationConflict
            ├── RevisionConflict
            └── UidMismatch

Callers match on types and `.code`, never on message text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from takoform_operator.core.actions import Action, Target
    from takoform_operator.core.state import OperationView, ResourceView


class HostError(Exception):
    code = "host_error"


class HostUnavailable(HostError):
    """Try again later. For a mutation the outcome is unknown: only a replay with the same
    idempotency key may follow, never a blind re-send."""

    code = "unavailable"

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class SecretNotFound(HostUnavailable):
    """A Secret a TakoformHost names is missing (or its key is): retry later, say which."""

    code = "secret_not_found"


class HostCertificateUntrusted(HostUnavailable):
    """The host's TLS certificate did not verify against the CA bundle in use: the host may have
    moved to a new CA, so the bundle is worth reading again before the next attempt."""

    code = "certificate_untrusted"


class HostProtocolError(HostError):
    code = "protocol_error"


class HostRejected(HostError):
    code = "rejected"

    def __init__(self, status: int, code: str, message: str, details: dict[str, Any]) -> None:
        super().__init__(f"{code} ({status}): {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details


class Unauthenticated(HostRejected):
    pass


class Forbidden(HostRejected):
    pass


class InvalidRequest(HostRejected):
    pass


class ValidationFailed(HostRejected):
    @property
    def field(self) -> str | None:
        value = self.details.get("field")
        return str(value) if value is not None else None


class PayloadTooLarge(HostRejected):
    pass


class UnsupportedMediaType(HostRejected):
    pass


class NotFound(HostRejected):
    pass


class SpaceNotFound(NotFound):
    pass


class FormUnknown(NotFound):
    pass


class ResourceNotFound(NotFound):
    pass


class OperationNotFound(NotFound):
    pass


class OperationInProgress(HostRejected):
    @property
    def operation_id(self) -> str | None:
        value = self.details.get("operationId")
        return str(value) if value else None


class IdempotencyKeyReused(OperationInProgress):
    pass


class PreconditionFailed(HostRejected):
    pass


class ResourceExists(PreconditionFailed):
    pass


class GenerationConflict(PreconditionFailed):
    pass


class RevisionConflict(PreconditionFailed):
    pass


class UidMismatch(PreconditionFailed):
    pass


ERROR_CLASSES: dict[str, type[HostRejected]] = {
    "invalid_request": InvalidRequest,
    "unauthenticated": Unauthenticated,
    "forbidden": Forbidden,
    "space_not_found": SpaceNotFound,
    "form_unknown": FormUnknown,
    "resource_not_found": ResourceNotFound,
    "operation_not_found": OperationNotFound,
    "route_not_found": NotFound,
    "method_not_allowed": InvalidRequest,
    "operation_in_progress": OperationInProgress,
    "space_not_empty": HostRejected,
    "resource_exists": ResourceExists,
    "generation_conflict": GenerationConflict,
    "revision_conflict": RevisionConflict,
    "uid_mismatch": UidMismatch,
    "payload_too_large": PayloadTooLarge,
    "unsupported_media_type": UnsupportedMediaType,
    "validation_failed": ValidationFailed,
    "idempotency_key_reused": IdempotencyKeyReused,
    "precondition_required": InvalidRequest,
}


class HostPort(Protocol):
    """The host as the reconcile needs it: observe, get operation, create, update, delete."""

    async def get_operation(self, operation_id: str) -> OperationView: ...

    async def read(self, target: Target) -> ResourceView | None: ...

    async def list_operations(self, target: Target) -> list[tuple[str, OperationView]]: ...

    async def execute(self, action: Action) -> tuple[str, OperationView]: ...
