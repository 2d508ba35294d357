"""A custom resource as the core sees it, and the status the core's outcome becomes.

Plain functions over the CR's JSON body: no kopf and no API calls, so they are unit-tested alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from takoform_operator.core.conditions import merge_conditions
from takoform_operator.core.reconcile import Outcome
from takoform_operator.core.state import DeletionPolicy, Desired, state_to_status
from takoform_spec.errors import InvalidIdentity
from takoform_spec.identity import FormLine, validate_resource_name, validate_space_id

#: The annotation that imports a new incarnation explicitly (rule 6, remedy 1).
ACCEPT_UID_ANNOTATION = "takoform.io/accept-uid"


class InvalidCustomResource(ValueError):
    """The CR asks for something no reconcile can do (reported as a condition, not raised)."""


def desired_from_cr(body: Mapping[str, Any]) -> Desired:
    """The desired state a CR body asks for. Raises InvalidCustomResource with a clear reason."""
    metadata = body.get("metadata") or {}
    spec = body.get("spec") or {}
    api_version, kind = str(body.get("apiVersion", "")), str(body.get("kind", ""))
    try:
        space = validate_space_id(spec.get("space"))
        name = validate_resource_name(spec.get("resourceName") or metadata.get("name"))
    except InvalidIdentity as exc:
        raise InvalidCustomResource(str(exc)) from None
    pin_doc = spec.get("formRef")
    pin = (str(pin_doc["definitionVersion"]), str(pin_doc["schemaDigest"])) if pin_doc else None
    policy = spec.get("deletionPolicy") or DeletionPolicy.DELETE.value
    try:
        deletion_policy = DeletionPolicy(policy)
    except ValueError:
        raise InvalidCustomResource(f"deletionPolicy {policy!r} is not Delete or Orphan") from None
    annotations = metadata.get("annotations") or {}
    return Desired(
        cr_uid=str(metadata["uid"]),
        cr_generation=int(metadata.get("generation") or 0),
        line=FormLine(api_version, kind),
        space=space,
        name=name,
        parameters=dict(spec.get("parameters") or {}),
        pin=pin,
        deletion_policy=deletion_policy,
        import_id=spec.get("importId") or None,
        accept_uid=annotations.get(ACCEPT_UID_ANNOTATION) or None,
        deleting=metadata.get("deletionTimestamp") is not None,
    )


def status_patch(
    outcome: Outcome,
    previous_conditions: Sequence[Mapping[str, Any]] | None,
    *,
    now: str,
    cr_generation: int,
) -> dict[str, Any]:
    """The merge-patch body of the CR's status for an outcome. Cleared values are nulls, so the
    patch removes them; the condition list is replaced whole."""
    return {
        **state_to_status(outcome.state),
        "conditions": merge_conditions(
            previous_conditions, outcome.conditions, now=now, observed_generation=cr_generation
        ),
        "observedGeneration": cr_generation,
    }
