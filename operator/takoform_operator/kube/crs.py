"""A custom resource as the core sees it, and the status the core's outcome becomes.

`read_cr` is the first step of the one reconcile (service.reconcile): what the CR asks for and
what its status records, or the outcome of a CR that cannot be read. Plain functions over the
CR's JSON body: no kopf and no API calls, so they are unit-tested alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from takoform_operator.core.binding import Binding
from takoform_operator.core.conditions import ConditionType, Reason, merge_conditions
from takoform_operator.core.depth import pruned_paths, too_deep_message
from takoform_operator.core.outcome import Outcome, blocked, with_deleting
from takoform_operator.core.ownership import restored
from takoform_operator.core.policy import (
    PAUSED_ANNOTATION,
    PAUSED_VALUE,
    releases_without_host_call,
    unparsed,
)
from takoform_operator.core.remedies import kubectl_name, unreadable_status_remedies
from takoform_operator.core.state import (
    DEFAULT_HOST,
    DeletionPolicy,
    Desired,
    ManagementPolicy,
    Requested,
    State,
    StateUnreadable,
    state_from_status,
    state_to_status,
)
from takoform_spec.errors import InvalidIdentity
from takoform_spec.identity import (
    FormLine,
    form_ref_problems,
    validate_resource_name,
    validate_space_id,
)

#: The annotation that imports a new incarnation explicitly (rule 6, remedy 1).
ACCEPT_UID_ANNOTATION = "takoform.io/accept-uid"


class InvalidCustomResource(ValueError):
    """The CR asks for something no reconcile can do (reported as a condition, not raised)."""


#: What reading a CR gives the reconcile: what it asks for and what it recorded, or the outcome
#: of a CR that cannot be read (it sends nothing; a deletion that needs no host call goes).
Read = tuple[Desired, State] | Outcome


def read_cr(
    body: Mapping[str, Any],
    bound: Binding | None,
    *,
    deleting: bool = False,
    held: Mapping[str, Any] | None = None,
) -> Read:
    """The CR `body` as the reconcile takes it: its desired state, and its state as its status
    records it (with `held`, the status write the last look held, merged in), restored from
    `bound` (its binding: a status write lost after the binding left the claim there).
    `deleting` forces a deletion before the body says so. A status that does not read is never
    guessed from (it may record a resource a deletion must not forget); a spec that does not
    parse is replaced, for a deletion, by the target recorded (deletion goes to what was sent
    to); the rest is core.policy's."""
    deleting = deleting or (body.get("metadata") or {}).get("deletionTimestamp") is not None
    if held is not None:
        body = {**body, "status": merged_status(body.get("status"), held)}
    try:
        state = _state_of(body.get("status") or {})
    except StateUnreadable as exc:
        return _unreadable(body, str(exc), deleting=deleting)
    state = restored(state, bound)
    # Values nested too deep were cut where the object was decoded (core.depth): such a spec
    # is not read, as if it did not parse; a deletion still goes by what was recorded.
    too_deep = pruned_paths(body.get("spec"), "spec")
    try:
        if too_deep:
            raise InvalidCustomResource(too_deep_message(too_deep))
        desired = desired_from_cr(body)
    except InvalidCustomResource as exc:
        try:
            if not (deleting and state.requested is not None):
                raise
            desired = desired_for_deletion(body, state.requested)
        except InvalidCustomResource:
            reason = Reason.NESTED_TOO_DEEP if too_deep else Reason.INVALID_SPEC
            return unparsed(state, reason, str(exc), deleting=deleting)
    return replace(desired, deleting=desired.deleting or deleting), state


def _state_of(status: Mapping[str, Any]) -> State:
    """The state a status records. Raises StateUnreadable for anything the operator never
    writes: a field of another type, a target without its space or name."""
    try:
        state = state_from_status(dict(status))
    except (AttributeError, TypeError, ValueError) as exc:
        # state_from_status lets a few malformed shapes out as the error they are.
        raise StateUnreadable(f"status does not hold a readable state: {exc}") from None
    requested = state.requested or Requested("", "")
    texts = {
        "host": state.host,
        "space": state.space,
        "name": state.name,
        "uid": state.uid,
        "generation": state.generation,
        "revision": state.revision,
        "packageDigest": state.package_digest,
        "requested.importId": requested.import_id,
        "requested.hostRef": requested.host_ref,
    }
    wrong = [f"{key} is not a string" for key, v in texts.items() if not isinstance(v, str | None)]
    wrong += [
        f"formRef without {key}"
        for key in ("space", "name")
        if state.claimed and texts[key] is None
    ]
    if wrong:
        raise StateUnreadable(f"status does not hold a readable state: {', '.join(wrong)}")
    return state


def _unreadable(body: Mapping[str, Any], problem: str, *, deleting: bool) -> Read:
    """A CR whose status does not read: Blocked StateUnreadable (only what is written beside
    the state changes: the fields as found are what a restore needs), unless it is a deletion
    that needs no host call (Orphan, Observe): that goes, its binding Released (core.policy)."""
    try:
        wanted = replace(desired_from_cr(body), deleting=True) if deleting else None
    except InvalidCustomResource:
        wanted = None
    if wanted is not None and releases_without_host_call(wanted):
        return wanted, State()
    metadata = body.get("metadata") or {}
    line = FormLine(str(body.get("apiVersion", "")), str(body.get("kind", "")))
    obj = kubectl_name(line, str(metadata.get("name")), str(metadata.get("namespace") or ""))
    outcome = blocked(
        State(),
        Reason.STATE_UNREADABLE,
        f"{problem}; nothing is sent to the host until it reads again.",
        unreadable_status_remedies(obj, deleting=deleting),
    )
    return with_deleting(outcome, wanted) if wanted is not None else outcome


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
    pin = _pin(spec.get("formRef"), api_version, kind)
    policy = spec.get("deletionPolicy") or DeletionPolicy.DELETE.value
    try:
        deletion_policy = DeletionPolicy(policy)
    except ValueError:
        raise InvalidCustomResource(f"deletionPolicy {policy!r} is not Delete or Orphan") from None
    management = spec.get("managementPolicy") or ManagementPolicy.FULL.value
    try:
        management_policy = ManagementPolicy(management)
    except ValueError:
        raise InvalidCustomResource(
            f"managementPolicy {management!r} is not Full or Observe"
        ) from None
    annotations = metadata.get("annotations") or {}
    host_ref = spec.get("hostRef") or None
    if host_ref is not None and not isinstance(host_ref, str):
        raise InvalidCustomResource("spec.hostRef must be the name of a TakoformHost")
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
        namespace=str(metadata.get("namespace") or ""),
        cr_name=str(metadata.get("name") or ""),
        created=str(metadata.get("creationTimestamp") or ""),
        host_ref=host_ref,
        # The default host's name is resolved by the caller (kube.tenancy) before any use.
        host=host_ref or DEFAULT_HOST,
        paused=annotations.get(PAUSED_ANNOTATION) == PAUSED_VALUE,
        unclear_pause=_unclear_pause(annotations),
        management=management_policy,
    )


def _unclear_pause(annotations: Mapping[str, Any]) -> str | None:
    """takoform.io/paused: "true" pauses, "false" (or no annotation) does not. Any other value
    is refused rather than guessed (core.policy.hold): this says why."""
    value = annotations.get(PAUSED_ANNOTATION)
    if value is None or value in ("false", PAUSED_VALUE):
        return None
    return (
        f'annotation {PAUSED_ANNOTATION} must be "true" (pause) or "false"; got {value!r}. '
        "Nothing is sent to the host until it is fixed or removed"
    )


def desired_for_deletion(body: Mapping[str, Any], requested: Requested) -> Desired:
    """What a CR being deleted asks for when its spec no longer parses: the identity recorded
    when its target was (deletion goes to what was sent to, never to the spec) and its policy.
    Raises InvalidCustomResource when even the deletion policy is unusable."""
    pin = requested.pin
    spec = {
        **(body.get("spec") or {}),
        "space": requested.space,
        "resourceName": requested.name,
        "formRef": {"definitionVersion": pin[0], "schemaDigest": pin[1]} if pin else None,
        "importId": requested.import_id,
        "hostRef": requested.host_ref,
        "parameters": {},
    }
    return desired_from_cr({**body, "spec": spec})


def _pin(doc: Any, api_version: str, kind: str) -> tuple[str, str] | None:
    """spec.formRef, checked as an exact FormRef of this line (CRDs without the patterns exist)."""
    if not doc:
        return None
    if not isinstance(doc, Mapping):
        raise InvalidCustomResource("spec.formRef must be an object")
    version, digest = doc.get("definitionVersion"), doc.get("schemaDigest")
    problems = form_ref_problems(api_version, kind, version, digest)
    if problems:
        raise InvalidCustomResource(f"spec.formRef is not an exact FormRef: {'; '.join(problems)}")
    return str(version), str(digest)


def merged_status(status: Mapping[str, Any] | None, patch: Mapping[str, Any]) -> dict[str, Any]:
    """`status` after the merge-patch `patch` (RFC 7386: null removes a member)."""
    merged = dict(status or {})
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merged_status(merged[key], value)
        else:
            merged[key] = value
    return merged


def status_diff(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> dict[str, Any]:
    """The merge-patch that turns `before` into `after` (RFC 7386): members that differ, maps
    merged member by member, anything else (lists included) replaced whole, a null for each
    member `after` lacks. `merged_status(before, status_diff(before, after)) == after`."""
    before = before or {}
    patch: dict[str, Any] = {key: None for key in before if key not in after}
    for key, value in after.items():
        was = before.get(key)
        if value == was:
            continue
        if isinstance(value, Mapping) and isinstance(was, Mapping):
            patch[key] = status_diff(was, value)
        else:
            patch[key] = value
    return patch


def status_change(
    status: Mapping[str, Any] | None,
    held: Mapping[str, Any] | None,
    outcome: Outcome,
    *,
    now: str,
    generation: int,
) -> dict[str, Any] | None:
    """The merge-patch that turns the `status` the API server holds into the outcome's over
    the status the look reconciled from (`held`, the held write, merged in), or None when it
    would change nothing. A status that did not read is never overwritten: only what is written
    beside the state changes."""
    seen = merged_status(status, held or {})
    patch = status_patch(outcome, seen, now=now, cr_generation=generation)
    if outcome.asserted().get(ConditionType.BLOCKED) is Reason.STATE_UNREADABLE:
        patch = {k: patch[k] for k in ("conditions", "observedGeneration", "remedies")}
    return status_diff(status, merged_status(seen, patch)) or None


def status_patch(
    outcome: Outcome,
    previous: Mapping[str, Any] | None,
    *,
    now: str,
    cr_generation: int,
) -> dict[str, Any]:
    """The merge-patch body that turns the CR's `previous` status into the outcome's. Cleared
    values are nulls, so the patch removes them; the condition list is replaced whole, and so are
    the outputs (a key the host no longer reports is removed, not merged over). An outcome that
    observed nothing (`holds_conditions`: a paused CR) or could not ask the host
    (`keeps_last_known`: the conditions it keeps belong to the generation they were set for)
    leaves observedGeneration where it was."""
    previous = previous or {}
    patch = {
        **state_to_status(outcome.state),
        "conditions": merge_conditions(
            previous.get("conditions"),
            outcome.conditions,
            now=now,
            observed_generation=cr_generation,
            keep_unnamed=outcome.holds_conditions or outcome.keeps_last_known,
        ),
    }
    patch["outputs"] = _replacing(previous.get("outputs"), patch["outputs"])
    if not (outcome.holds_conditions or outcome.keeps_last_known):
        # The remedies belong to the conditions: kept while those are kept, else replaced.
        patch["remedies"] = [remedy.to_json() for remedy in outcome.remedies] or None
        patch["observedGeneration"] = cr_generation
    return patch


def _replacing(before: Any, after: Any) -> Any:
    """The merge-patch value that replaces `before` by `after` whole (RFC 7386 merges maps, so
    every member `after` lacks is named with a null)."""
    if not isinstance(before, Mapping) or not isinstance(after, Mapping):
        return after
    patch = {key: _replacing(before.get(key), value) for key, value in after.items()}
    patch.update({key: None for key in before if key not in after})
    return patch


def log_fields(body: Mapping[str, Any], host: str | None = None) -> dict[str, dict[str, str]]:
    """The `extra=` of a log line about this CR (takoform_operator.logs): `{"cr": {...}}` with
    its kind, namespace, name and uid as far as the body has them, and the host its requests go
    to when known."""
    metadata = body.get("metadata") or {}
    found = {
        "kind": body.get("kind"),
        "namespace": metadata.get("namespace") if isinstance(metadata, Mapping) else None,
        "name": metadata.get("name") if isinstance(metadata, Mapping) else None,
        "uid": metadata.get("uid") if isinstance(metadata, Mapping) else None,
        "host": host,
    }
    return {"cr": {key: str(value) for key, value in found.items() if value not in (None, "")}}
