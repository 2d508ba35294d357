"""Typed models of the host's JSON documents (docs/host-api.md sections 4 and 7)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from takoform_operator.core.state import (
    HostCondition,
    OperationView,
    OpState,
    ResourceView,
    Verb,
)
from takoform_spec.host_api import OperationState
from takoform_spec.identity import FormRef


class _Model(BaseModel):
    # Hosts may add members; the contract is what we read, not what we forbid.
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


class FormRefDoc(_Model):
    api_version: str = Field(alias="apiVersion")
    kind: str
    definition_version: str = Field(alias="definitionVersion")
    schema_digest: str = Field(alias="schemaDigest")

    @model_validator(mode="after")
    def _exact(self) -> FormRefDoc:
        # A FormRef that is not exact (a version that is not MAJOR.MINOR.PATCH, say) is a host
        # answer outside the contract: reported as one, never a ValueError in the reconcile.
        self.to_ref()
        return self

    def to_ref(self) -> FormRef:
        return FormRef(self.api_version, self.kind, self.definition_version, self.schema_digest)


class Metadata(_Model):
    space: str
    name: str
    uid: str
    generation: str
    revision: str
    creation_timestamp: str | None = Field(default=None, alias="creationTimestamp")
    package_digest: str | None = Field(default=None, alias="packageDigest")
    creation_idempotency_key: str | None = Field(default=None, alias="creationIdempotencyKey")


class ConditionDoc(_Model):
    type: str
    status: str
    reason: str | None = None
    message: str | None = None
    host_reason: str | None = Field(default=None, alias="hostReason")


class StatusDoc(_Model):
    observed_generation: str | None = Field(default=None, alias="observedGeneration")
    conditions: list[ConditionDoc] = Field(default_factory=list)
    outputs: dict[str, Any] = Field(default_factory=dict)


class Resource(_Model):
    form_ref: FormRefDoc = Field(alias="formRef")
    metadata: Metadata
    spec: dict[str, Any] = Field(default_factory=dict)
    status: StatusDoc = Field(default_factory=StatusDoc)

    def view(self) -> ResourceView:
        return ResourceView(
            form_ref=self.form_ref.to_ref(),
            space=self.metadata.space,
            name=self.metadata.name,
            uid=self.metadata.uid,
            generation=self.metadata.generation,
            revision=self.metadata.revision,
            spec=self.spec,
            outputs=self.status.outputs,
            creation_key=self.metadata.creation_idempotency_key,
            package_digest=self.metadata.package_digest,
            observed_generation=self.status.observed_generation,
            conditions=tuple(
                HostCondition(
                    type=c.type,
                    status=c.status,
                    reason=c.reason or "",
                    message=c.message or "",
                    host_reason=c.host_reason,
                )
                for c in self.status.conditions
            ),
        )


class OperationError(_Model):
    code: str
    message: str = ""


class Operation(_Model):
    id: str
    verb: Literal["create", "update", "delete"]
    state: OperationState
    space: str
    name: str
    form_ref: FormRefDoc = Field(alias="formRef")
    resource_uid: str | None = Field(default=None, alias="resourceUid")
    result_generation: str | None = Field(default=None, alias="resultGeneration")
    idempotency_key: str | None = Field(default=None, alias="idempotencyKey")
    error: OperationError | None = None

    def view(self) -> OperationView:
        return OperationView(
            state=OpState(self.state),
            resource_uid=self.resource_uid,
            idempotency_key=self.idempotency_key,
            verb=Verb(self.verb.capitalize()),
            space=self.space,
            form_ref=self.form_ref.to_ref(),
            name=self.name,
            error_code=self.error.code if self.error else None,
            error_message=self.error.message if self.error else None,
        )
