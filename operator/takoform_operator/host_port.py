"""The host as the reconcile service needs it: the HostPort protocol and the errors it raises.

Implementations (takoform_operator.host_client) translate HTTP answers into this tree once
(docs/host-api.md section 9):

    HostError
    ├── HostUnavailable          transport failure, 429 or 5xx: retryable (retry_after honoured)
    │   ├── SecretNotFound       a Secret the host names is missing (SecretNotOptedIn: not
    │   │                        opted in as its credential; ...ForUrl: not at its URL)
    │   ├── HostThrottled        429 (HostUnavailable as well)
    │   ├── BudgetSpent          nothing sent: the namespace's share of the host's budget is spent
    │   ├── HostInsecure         plain http without `insecure`: nothing is sent
    │   └── HostCertificateUntrusted
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

A rejection's `.code` is a member of the closed set (`takoform_spec.host_api.ErrorCode`);
`ERROR_CLASSES` names the class of each code a 4xx may carry. Callers match on types and `.code`,
never on message text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from takoform_spec.host_api import ErrorCode

if TYPE_CHECKING:
    from takoform_operator.core.actions import Action, Target
    from takoform_operator.core.state import OperationView, ResourceView


@dataclass(frozen=True)
class StoredSecret:
    """A Secret of the operator's namespace as the host clients need it: its data and its
    annotations (the opt-in, core.tenancy.CREDENTIAL_ANNOTATION)."""

    data: Mapping[str, bytes]
    annotations: Mapping[str, str] = field(default_factory=dict)


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


class SecretNotOptedIn(SecretNotFound):
    """A Secret a host names is not opted in as that host's credential
    (core.tenancy.CREDENTIAL_ANNOTATION): it is never used; the message says how to opt it in."""

    code = "secret_not_opted_in"


class SecretNotOptedInForUrl(SecretNotOptedIn):
    """A Secret a host names opts that host in at another URL, or by name only (the form of
    earlier releases): a credential is bound to an endpoint, so it is never used at this one."""

    code = "secret_not_opted_in_for_url"


class HostThrottled(HostUnavailable):
    """The host answered 429: too many requests (a signal about the namespace that sent it,
    core.host_budget); retry_after is its Retry-After, when it gave one."""

    code = "throttled"


class BudgetSpent(HostUnavailable):
    """Nothing was sent: the namespace's share of the operator's own budget for the host is
    spent (core.host_budget); retry_after is the wait until its next token. The operator pacing
    itself, not a host outage: the look is put off quietly (core.outcome.put_off)."""

    code = "budget_spent"


class HostInsecure(HostUnavailable):
    """A host with a plain http URL that does not say `insecure` explicitly: nothing is sent."""

    code = "host_insecure"


class HostCertificateUntrusted(HostUnavailable):
    """The host's TLS certificate did not verify against the CA bundle in use: the host may have
    moved to a new CA, so the bundle is worth reading again before the next attempt."""

    code = "certificate_untrusted"


class HostProtocolError(HostError):
    code = "protocol_error"


class HostRejected(HostError):
    code: ErrorCode

    def __init__(self, status: int, code: ErrorCode, message: str, details: dict[str, Any]) -> None:
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


#: The class of each code a 4xx answer may carry (every 4xx code of docs/host-api.md section 9).
#: A code outside it is a protocol error; 429 and 5xx answers are HostUnavailable whatever their
#: code; provisioning_failed is only ever an operation record's error.
ERROR_CLASSES: dict[ErrorCode, type[HostRejected]] = {
    ErrorCode.INVALID_REQUEST: InvalidRequest,
    ErrorCode.UNAUTHENTICATED: Unauthenticated,
    ErrorCode.FORBIDDEN: Forbidden,
    ErrorCode.SPACE_NOT_FOUND: SpaceNotFound,
    ErrorCode.FORM_UNKNOWN: FormUnknown,
    ErrorCode.RESOURCE_NOT_FOUND: ResourceNotFound,
    ErrorCode.OPERATION_NOT_FOUND: OperationNotFound,
    ErrorCode.ROUTE_NOT_FOUND: NotFound,
    ErrorCode.METHOD_NOT_ALLOWED: InvalidRequest,
    ErrorCode.OPERATION_IN_PROGRESS: OperationInProgress,
    ErrorCode.SPACE_NOT_EMPTY: HostRejected,
    ErrorCode.RESOURCE_EXISTS: ResourceExists,
    ErrorCode.GENERATION_CONFLICT: GenerationConflict,
    ErrorCode.REVISION_CONFLICT: RevisionConflict,
    ErrorCode.UID_MISMATCH: UidMismatch,
    ErrorCode.PAYLOAD_TOO_LARGE: PayloadTooLarge,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: UnsupportedMediaType,
    ErrorCode.VALIDATION_FAILED: ValidationFailed,
    ErrorCode.IDEMPOTENCY_KEY_REUSED: IdempotencyKeyReused,
    ErrorCode.PRECONDITION_REQUIRED: InvalidRequest,
}


class HostPort(Protocol):
    """The host as the reconcile needs it: observe, get operation, create, update, delete."""

    async def get_operation(self, operation_id: str) -> OperationView: ...

    async def read(self, target: Target) -> ResourceView | None: ...

    async def list_operations(self, target: Target) -> list[tuple[str, OperationView]]: ...

    async def execute(self, action: Action) -> tuple[str, OperationView]: ...
