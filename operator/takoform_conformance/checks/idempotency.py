"""§6 Idempotency keys: a repeated key replays, a reused key is refused, keys are kept."""

from __future__ import annotations

from typing import Any

import httpx

from takoform_spec.host_api import OperationState

from ..answers import describe
from ..context import Context
from ..outcomes import ensure
from .common import Check, generation_of, registrar, uid_of, unchanged

CHECKS: list[Check] = []
check = registrar(CHECKS)


def _replay_status(response: httpx.Response, original: str, what: str) -> dict[str, Any]:
    ensure(
        response.status_code in (200, 202),
        f"H-28: {what}: replay answered {describe(response)}, not the original operation",
    )
    record: dict[str, Any] = response.json()
    ensure(
        record.get("id") == original,
        f"H-28: {what}: replay answered operation {record.get('id')!r}, not {original}",
    )
    state = record.get("state")
    ensure(
        (response.status_code == 202) == (state == OperationState.RUNNING),
        f"H-28: {what}: replay status {response.status_code} with a {state} record",
    )
    return record


@check("idempotency-key-replays-original", "H-28", admin="optional")
def idempotency_key_replays_original(ctx: Context) -> None:
    """A repeated key with the same request answers the ORIGINAL operation and mutates nothing."""
    name = ctx.name("replay")
    key = ctx.key()
    spec = ctx.model().valid_spec()
    first = ctx.accepted(ctx.create(name, spec, key=key), "create")
    _replay_status(ctx.create(name, spec, key=key), first["id"], "immediate create replay")
    ctx.wait(first["id"])
    rep = ctx.representation(name)
    replay = _replay_status(ctx.create(name, spec, key=key), first["id"], "settled create replay")
    ensure(
        replay.get("state") == OperationState.SUCCEEDED, f"H-28: settled replay reports {replay}"
    )
    ensure(
        replay == ctx.get_operation(first["id"]).json(),
        "H-28: the replay's body is not the operation's current record",
    )
    unchanged(ctx, name, rep, "H-28", "a replayed create")

    update_key = ctx.key()
    changed = ctx.model().changed(rep["spec"])
    update = ctx.settle(ctx.update(name, changed, generation_of(rep), key=update_key), "update")
    updated = ctx.representation(name)
    _replay_status(
        ctx.update(name, changed, generation_of(rep), key=update_key),
        update["id"],
        "update replay (its generation fence is stale by now: the replay takes precedence)",
    )
    unchanged(ctx, name, updated, "H-28", "a replayed update")

    delete_key = ctx.key()
    delete = ctx.settle(ctx.delete(name, key=delete_key), "delete")
    _replay_status(ctx.delete(name, key=delete_key), delete["id"], "delete replay")
    ctx.expect_absent(name, "H-28", "after a replayed delete")
    recreate = ctx.accepted(ctx.create(name, spec), "create after the delete")
    ctx.wait(recreate["id"])
    _replay_status(ctx.create(name, spec, key=key), first["id"], "replay of the first create")
    ensure(
        uid_of(ctx.representation(name))
        == recreate.get("resourceUid", uid_of(ctx.representation(name))),
        "H-28: replaying the first create mutated the re-created resource",
    )

    if ctx.admin_http is not None:
        running_name = ctx.name("replay")
        running_key = ctx.key()
        with ctx.faults(stuckOperations=True):
            held = ctx.accepted(ctx.create(running_name, spec, key=running_key), "held create")
            replay = _replay_status(
                ctx.create(running_name, spec, key=running_key),
                held["id"],
                "replay of a running create (takes precedence over operation_in_progress)",
            )
            ensure(
                replay.get("state") == OperationState.RUNNING,
                "H-28: a held create replayed as settled",
            )
            ctx.release()
            ctx.wait(held["id"])


@check("idempotency-key-reuse-refused", "H-29")
def idempotency_key_reuse_refused(ctx: Context) -> None:
    """A key repeated with a different request fails idempotency_key_reused, changing nothing."""
    key = ctx.key()
    name = ctx.name("reuse")
    record = ctx.settle(ctx.create(name, key=key), "create")
    rep = ctx.representation(name)
    other = ctx.name("reuse")
    ctx.track(other, None, None)
    attempts = [
        ("same name, different body", ctx.create(name, ctx.model().changed(rep["spec"]), key=key)),
        ("another name", ctx.create(other, rep["spec"], key=key)),
        ("an update of the resource", ctx.update(name, rep["spec"], generation_of(rep), key=key)),
        ("a delete of the resource", ctx.delete(name, key=key)),
    ]
    for what, response in attempts:
        details = ctx.expect_error(
            response, 422, "idempotency_key_reused", "H-29", f"key reused for {what}"
        )
        ensure(
            details.get("operationId") == record["id"],
            f"H-29: {what}: details.operationId is {details.get('operationId')!r}, "
            f"not {record['id']}",
        )
    ctx.expect_absent(other, "H-29", "a reused key created another resource")
    unchanged(ctx, name, rep, "H-29", "requests reusing a key")


@check("idempotency-key-recorded", "H-30")
def idempotency_key_recorded(ctx: Context) -> None:
    """The key is on the operation record, and a create's key on the resource it made."""
    key = ctx.key()
    name = ctx.name("recorded")
    accepted = ctx.accepted(ctx.create(name, key=key), "create")
    ensure(
        accepted.get("idempotencyKey") == key,
        f"H-30: the create's record carries idempotencyKey {accepted.get('idempotencyKey')!r}",
    )
    final = ctx.wait(accepted["id"])
    ensure(final.get("idempotencyKey") == key, "H-30: the settled record lost its idempotencyKey")
    rep = ctx.representation(name)
    ensure(
        rep["metadata"].get("creationIdempotencyKey") == key,
        "H-30: metadata.creationIdempotencyKey is "
        f"{rep['metadata'].get('creationIdempotencyKey')!r}, not the create's key",
    )
    update_key = ctx.key()
    update = ctx.settle(
        ctx.update(name, ctx.model().changed(rep["spec"]), generation_of(rep), key=update_key),
        "update",
    )
    ensure(update.get("idempotencyKey") == update_key, "H-30: the update's record lacks its key")
    after = ctx.representation(name)
    ensure(
        after["metadata"].get("creationIdempotencyKey") == key,
        "H-30: an update changed metadata.creationIdempotencyKey",
    )
