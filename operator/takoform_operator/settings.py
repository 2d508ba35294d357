"""The operator's settings: one typed object, read from TAKOFORM_* environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Every knob of the operator. Environment: TAKOFORM_<FIELD> (e.g. TAKOFORM_HOST_URL)."""

    model_config = SettingsConfigDict(env_prefix="TAKOFORM_", extra="ignore")

    host_url: str = Field(
        default="http://127.0.0.1:8787", description="Base URL of the Takoform host."
    )
    host_token: SecretStr | None = Field(default=None, description="Bearer token for the host.")
    host_token_file: Path | None = Field(
        default=None, description="File holding the bearer token (wins over host_token)."
    )
    host_token_secret: str | None = Field(
        default=None,
        description="Secret of the operator's namespace holding the bearer token (wins over "
        "host_token_file), read like a TakoformHost's: it must be opted in for host `default` "
        "at host_url (annotation takoform.io/host-credential-for=default=URL, "
        "docs/tenancy.md).",
    )
    host_token_secret_key: str = Field(
        default="token", min_length=1, description="Key of the token in host_token_secret."
    )
    host_insecure: bool = Field(
        default=False,
        description="Allow a plain http host_url (the token travels in clear text); without "
        "it only https is used and nothing is sent to an http URL.",
    )
    host_ca_bundle: Path | None = Field(default=None, description="CA bundle to verify the host.")
    host_client_cert: Path | None = Field(default=None, description="Client certificate (PEM).")
    host_client_key: Path | None = Field(default=None, description="Client certificate key.")
    host_timeout_seconds: float = Field(default=10.0, gt=0, description="Per-request timeout.")
    host_read_retries: int = Field(
        default=3,
        ge=0,
        description="Retries of a READ on transport errors, 429 and 5xx, within one look (an "
        "answer with Retry-After is left to the back-off).",
    )
    host_max_connections: int = Field(default=20, ge=1, description="Connection pool size.")
    host_requests_per_second: float | None = Field(
        default=None,
        gt=0,
        description="Requests per second the CRs may send to each host, shared fairly among "
        "the namespaces that use it (a token bucket per host and namespace); a namespace "
        "whose share is spent sends nothing and backs off, and a 429 holds only the namespace "
        "that drew it (docs/tenancy.md). The first looks after a start come at this rate too. "
        "Unset: no budget.",
    )
    host_request_burst: float | None = Field(
        default=None,
        ge=1,
        description="Requests at once within host_requests_per_second, shared likewise "
        "(default: one second's worth).",
    )
    poll_ready_seconds: float = Field(
        default=60.0, gt=0, description="Re-observe a ready resource this often (drift)."
    )
    poll_idle_max_seconds: float = Field(
        default=600.0,
        gt=0,
        description="A ready resource whose look changed nothing (the host answered as before) "
        "is looked at twice as late each time, from poll_ready_seconds up to this (at or below "
        "poll_ready_seconds: every poll at poll_ready_seconds); any change starts again from "
        "poll_ready_seconds. A change made on the host out of band is noticed within this long.",
    )
    start_spread_seconds: float = Field(
        default=30.0,
        ge=0,
        description="After a start (or a shard taking over CRs), a resource already Ready for "
        "its generation is first looked at within this many seconds, spread evenly, not all at "
        "once; one that needs work at once (0: every one at once). With "
        "host_requests_per_second set, those first looks come at that rate instead, one after "
        "the other (N of them take N / rate seconds).",
    )
    poll_pending_max_seconds: float = Field(
        default=8.0,
        gt=0,
        description="A pending operation (or a host resource not ready yet) is looked at after "
        "0.25 s, then twice as late each time, up to this.",
    )
    backoff_base_seconds: float = Field(
        default=1.0,
        gt=0,
        description="Back-off after a failure: the first retry waits up to this long, each "
        "failure in a row doubles it (full jitter).",
    )
    backoff_cap_seconds: float = Field(
        default=300.0,
        gt=0,
        description="Back-off never waits longer than this, a host's Retry-After included.",
    )
    max_concurrent_reconciles: int = Field(
        default=16, ge=1, description="Reconciles running at once (each makes host requests)."
    )
    max_reconciles_per_host: int | None = Field(
        default=None,
        ge=1,
        description="Reconciles of one host's CRs running at once while there is more than one "
        "host, so that a slow host cannot hold every slot (default: three quarters of "
        "max_concurrent_reconciles, at least 1).",
    )
    reconcile_scheduling: Literal["fair", "fifo"] = Field(
        default="fair",
        description="`fair`: slots go round robin across namespaces, with the per-host cap, "
        "and within a namespace a CR with work in progress first; `fifo`: one queue in "
        "arrival order, no host cap (for comparison).",
    )
    metrics_port: int = Field(
        default=8000, ge=0, le=65535, description="Prometheus metrics port (0: off)."
    )
    metrics_auth: Literal["kubernetes", "none"] = Field(
        default="kubernetes",
        description="Who may read /metrics: `kubernetes`, a caller whose bearer token the API "
        "server authenticates (TokenReview) and whose user may get the non-resource URL "
        "/metrics (SubjectAccessReview), else 401 or 403; `none`, anyone who reaches the port "
        "(local runs).",
    )
    namespace: str | None = Field(
        default=None, description="Watch only this namespace (default: all namespaces)."
    )
    shard_selector: str | None = Field(
        default=None,
        description="Label selector of the CRs this process reconciles (default: all); "
        "e.g. `shard=a` or `shard in (a,b)`. See docs/scaling.md.",
    )
    sharding: Literal["off", "hash"] = Field(
        default="off",
        description="`hash`: every replica reconciles, each the CRs of the slots that the live "
        "replicas' view places on it, an even share (one Lease per replica; docs/scaling.md); "
        "`off`: one "
        "process reconciles all (with leader_election, one replica at a time).",
    )
    shard_key: Literal["name", "namespace"] = Field(
        default="name",
        description="What places a CR on the ring with sharding `hash`: `name` (its namespace "
        "and name) or `namespace` (every CR of a namespace on one replica).",
    )
    bind_address: str = Field(
        default="0.0.0.0", description="Address the metrics and health endpoints listen on."
    )
    health_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="Port of /healthz and /readyz for the kubelet (0: off).",
    )
    watch_failure_seconds: float = Field(
        default=300.0,
        gt=0,
        description="A list or watch of the API server failing this long (after kopf's own "
        "retries) makes /healthz fail, so the kubelet restarts the pod.",
    )
    log_format: Literal["text", "json"] = Field(
        default="text", description="Log lines as plain text or one JSON object per line."
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="INFO", description="Lowest level logged."
    )
    leader_election: bool = Field(
        default=False,
        description="Reconcile only while holding a coordination.k8s.io Lease (for replicas > 1).",
    )
    lease_name: str = Field(
        default="takoform-operator",
        description="Name of that Lease; with sharding `hash`, the ring's name: each replica's "
        "Lease is `<name>-shard-<pod_name>`.",
    )
    lease_namespace: str | None = Field(
        default=None, description="Namespace of the Lease (default: the pod's, POD_NAMESPACE)."
    )
    lease_seconds: float = Field(default=15.0, gt=0, description="Lease duration.")
    lease_renew_deadline_seconds: float = Field(
        default=10.0, gt=0, description="A leader (or shard) that cannot renew for this long stops."
    )
    lease_retry_seconds: float = Field(default=2.0, gt=0, description="Renew/retry period.")
    pod_name: str | None = Field(
        default=None,
        description="This replica's identity: in the Lease, and as the reportingInstance of "
        "its Events (default: hostname and process id).",
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    operator_namespace: str | None = Field(
        default=None,
        description="Namespace of the Secrets TakoformHosts name (default: the pod's own "
        "namespace, else the watched namespace, else `default`).",
    )
    implicit_host: bool = Field(
        default=True,
        description="Serve the host_* settings as the host named `default` (docs/tenancy.md).",
    )
    token_refresh_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Re-read host Secrets (token, CA bundle, client certificate) this often "
        "(a token also after a 401, the CA bundle after a certificate failed to verify).",
    )
    connection_secret_role: str | None = Field(
        default=None,
        description="The ClusterRole holding the operator's connection-Secret rights, bound "
        "per served namespace (named in the ConnectionSecretForbidden remedy; docs/tenancy.md).",
    )
    service_account: str | None = Field(
        default=None,
        description="The operator's ServiceAccount as `namespace:name` (named in the "
        "ConnectionSecretForbidden remedy).",
    )
    host_status_seconds: float = Field(
        default=60.0, gt=0, description="Probe each TakoformHost and write its status this often."
    )

    @model_validator(mode="after")
    def _settings_that_can_work(self) -> Settings:
        """Combinations that each look valid alone but cannot work together; every message names
        the settings as a user sets them (TAKOFORM_*)."""
        problems = [
            f"{_env('backoff_cap_seconds')} ({self.backoff_cap_seconds}) is below "
            f"{_env('backoff_base_seconds')} ({self.backoff_base_seconds})"
            if self.backoff_cap_seconds < self.backoff_base_seconds
            else "",
            f"{_env('metrics_port')} and {_env('health_port')} are both {self.metrics_port}"
            if self.metrics_port and self.metrics_port == self.health_port
            else "",
        ]
        if self.leader_election and self.sharding == "hash":
            problems.append(
                f"{_env('sharding')}=hash and {_env('leader_election')}=true exclude each "
                "other: with sharding every replica reconciles its share"
            )
        if self.leader_election or self.sharding == "hash":
            # A leader must give up before its lease runs out (else two replicas reconcile at
            # once), and must be able to retry at least once before it gives up.
            problems += [
                f"{_env('lease_renew_deadline_seconds')} ({self.lease_renew_deadline_seconds}) "
                f"must be below {_env('lease_seconds')} ({self.lease_seconds})"
                if self.lease_renew_deadline_seconds >= self.lease_seconds
                else "",
                f"{_env('lease_retry_seconds')} ({self.lease_retry_seconds}) must be below "
                f"{_env('lease_renew_deadline_seconds')} ({self.lease_renew_deadline_seconds})"
                if self.lease_retry_seconds >= self.lease_renew_deadline_seconds
                else "",
            ]
        found = [problem for problem in problems if problem]
        if found:
            raise ValueError("; ".join(found))
        return self

    def host_slots(self) -> int:
        """The slots the CRs of one host may hold at once."""
        if self.max_reconciles_per_host is not None:
            return min(self.max_reconciles_per_host, self.max_concurrent_reconciles)
        return max(1, self.max_concurrent_reconciles * 3 // 4)

    def secrets_namespace(self) -> str:
        """Where the Secrets named by TakoformHosts live: the operator's own namespace."""
        if self.operator_namespace:
            return self.operator_namespace
        mounted = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        if mounted.is_file():
            return mounted.read_text(encoding="utf-8").strip()
        return self.namespace or "default"

    def host_tls(self) -> tuple[Any, Any]:
        """httpx's `verify` and `cert` for the implicit host (file paths, read at start)."""
        verify: Any = str(self.host_ca_bundle) if self.host_ca_bundle else True
        cert: Any = None
        if self.host_client_cert:
            key = str(self.host_client_key) if self.host_client_key else None
            cert = (str(self.host_client_cert), key) if key else str(self.host_client_cert)
        return verify, cert

    def token(self) -> str | None:
        """The implicit host's token from the environment or its file (host_token_secret is
        read through the Secret reader, main.implicit_endpoint)."""
        if self.host_token_file is not None:
            return self.host_token_file.read_text(encoding="utf-8").strip()
        return self.host_token.get_secret_value() if self.host_token else None


def _env(field: str) -> str:
    """A setting's name as a user sets it."""
    return f"TAKOFORM_{field.upper()}"


def settings_error(exc: ValidationError) -> str:
    """A pydantic error about the settings as one line that names each setting."""
    parts = []
    for error in exc.errors():
        where = ", ".join(_env(str(part)) for part in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)
