"""The operator's settings: one typed object, read from TAKOFORM_* environment variables."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
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
    host_ca_bundle: Path | None = Field(default=None, description="CA bundle to verify the host.")
    host_client_cert: Path | None = Field(default=None, description="Client certificate (PEM).")
    host_client_key: Path | None = Field(default=None, description="Client certificate key.")
    host_timeout_seconds: float = Field(default=10.0, gt=0, description="Per-request timeout.")
    host_read_retries: int = Field(
        default=3, ge=0, description="Retries of a READ on transport errors, 429 and 5xx."
    )
    host_max_connections: int = Field(default=20, ge=1, description="Connection pool size.")
    poll_ready_seconds: float = Field(
        default=60.0, gt=0, description="Re-observe a ready resource this often (drift)."
    )
    max_concurrent_reconciles: int = Field(
        default=16, ge=1, description="Reconciles running at once (each makes host requests)."
    )
    metrics_port: int = Field(default=8000, ge=0, description="Prometheus metrics port (0: off).")
    namespace: str | None = Field(
        default=None, description="Watch only this namespace (default: all namespaces)."
    )
    shard_selector: str | None = Field(
        default=None,
        description="Label selector of the CRs this process reconciles (default: all); "
        "e.g. `shard=a` or `shard in (a,b)`. See docs/scaling.md.",
    )
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
        default=30.0, gt=0, description="Re-read host tokens this often (and after a 401)."
    )
    host_status_seconds: float = Field(
        default=60.0, gt=0, description="Probe each TakoformHost and write its status this often."
    )

    def secrets_namespace(self) -> str:
        """Where the Secrets named by TakoformHosts live: the operator's own namespace."""
        if self.operator_namespace:
            return self.operator_namespace
        mounted = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        if mounted.is_file():
            return mounted.read_text(encoding="utf-8").strip()
        return self.namespace or "default"

    def token(self) -> str | None:
        if self.host_token_file is not None:
            return self.host_token_file.read_text(encoding="utf-8").strip()
        return self.host_token.get_secret_value() if self.host_token else None
