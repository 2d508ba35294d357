"""§4 The resource envelope (0011): uid, generation, revision, ETag, conditions, binding."""

from __future__ import annotations

import time

import httpx

from takoform_spec.host_api import CONDITION_TYPES, PORTABLE_REASONS

from ..answers import describe
from ..context import Context
from ..outcomes import CheckSkipped, ensure, fail
from ..vocabulary import DECIMAL
from .common import Check, generation_of, registrar, revision_of, uid_of, unchanged

CHECKS: list[Check] = []
check = registrar(CHECKS)


@check("envelope-shape", "H-11")
def envelope_shape(ctx: Context) -> None:
    """metadata.name is the only name; spec holds only the fields the exact definition declares."""
    model = ctx.model()
    name, rep = ctx.make("envelope")
    ensure(rep.get("formRef") == ctx.primary.to_json(), f"H-11: formRef is {rep.get('formRef')}")
    meta = rep.get("metadata")
    if not isinstance(meta, dict):
        raise fail("H-11: no metadata object")
    ensure(meta.get("name") == name, f"H-11: metadata.name is {meta.get('name')!r}, not {name!r}")
    ensure(meta.get("space") == ctx.space, f"§4: metadata.space is {meta.get('space')!r}")
    spec = rep.get("spec")
    if not isinstance(spec, dict):
        raise fail("H-11: spec is not an object")
    extra = sorted(set(spec) - set(model.fields))
    ensure(not extra, f"H-11: spec holds fields the definition does not declare: {extra}")
    for key in ("uid", "generation", "revision"):
        ensure(isinstance(meta.get(key), str) and meta[key], f"§4: metadata.{key} missing")
    ensure(isinstance(rep.get("status"), dict), "§4: status is not an object")


@check("uid-stability", "H-12", "H-11")
def uid_stability(ctx: Context) -> None:
    """The uid issued at create never changes across observes, updates and no-op updates."""
    name = ctx.name("uid")
    record = ctx.settle(ctx.create(name), "create")
    rep = ctx.representation(name)
    uid = uid_of(rep)
    ensure(uid, "H-12: empty uid")
    ensure(rep["metadata"].get("name") == name, "H-11: metadata.name differs from the name")
    if record.get("resourceUid") is not None:
        ensure(record["resourceUid"] == uid, "H-12: the uid differs from the create's resourceUid")
    observed = ctx.observe(name)
    ensure(observed.status_code == 200, f"§4 observe: {describe(observed)}")
    ensure(uid_of(observed.json()) == uid, "H-12: observe changed the uid")
    ensure(uid_of(ctx.representation(name)) == uid, "H-12: the uid changed after observe")
    changed = ctx.change(name, ctx.representation(name))
    ensure(uid_of(changed) == uid, "H-12: an update changed the uid")
    ctx.settle(ctx.update(name, changed["spec"], generation_of(changed)), "no-op update")
    again = ctx.representation(name)
    ensure(uid_of(again) == uid, "H-12: a no-op update changed the uid")
    ensure(again["metadata"].get("name") == name, "H-11: metadata.name changed")


@check("delete-recreate-uid-change", "H-13", "H-36")
def delete_recreate_uid_change(ctx: Context) -> None:
    """Deleting and re-creating a name yields a new uid; a committed delete reads 404."""
    name, rep = ctx.make("recreate")
    ctx.settle(ctx.delete(name), "delete")
    ctx.expect_absent(name, "H-36", "after its delete committed")
    record = ctx.settle(ctx.create(name), "re-create")
    again = ctx.representation(name, what="after re-create")
    ensure(uid_of(again) != uid_of(rep), f"H-13: the re-created resource reuses uid {uid_of(rep)}")
    if record.get("resourceUid") is not None:
        ensure(
            record["resourceUid"] == uid_of(again),
            "H-31: the re-create's resourceUid differs from the new resource's uid",
        )


@check("generation-only-on-spec-change", "H-14", "H-19")
def generation_only_on_spec_change(ctx: Context) -> None:
    """Generation starts at "1" and grows by exactly one on a spec change, never otherwise."""
    name, rep = ctx.make("generation")
    ensure(
        generation_of(rep) == "1",
        f'H-14: generation of a new resource is {generation_of(rep)!r}, not "1"',
    )
    observed = ctx.observe(name)
    ensure(observed.status_code == 200, f"§4 observe: {describe(observed)}")
    ensure(generation_of(observed.json()) == "1", "H-19: observe changed the generation")
    ensure(
        generation_of(ctx.representation(name)) == "1", "H-19: the generation changed after observe"
    )
    ctx.settle(ctx.update(name, rep["spec"], "1"), "no-op update")
    ensure(
        generation_of(ctx.representation(name)) == "1",
        "H-14: an update whose spec equals the current spec changed the generation",
    )
    changed = ctx.change(name, ctx.representation(name))
    ensure(
        DECIMAL.match(generation_of(changed)),
        f"H-14: generation {generation_of(changed)!r} is not canonical",
    )
    ensure(
        generation_of(changed) == "2",
        f'H-14: a spec change made generation {generation_of(changed)!r}, not "2"',
    )
    ctx.settle(ctx.update(name, changed["spec"], "2"), "second no-op update")
    ctx.observe(name)
    ensure(
        generation_of(ctx.representation(name)) == "2",
        "H-14: generation moved without a spec change",
    )


@check("revision-on-status-change", "H-15", "H-19")
def revision_on_status_change(ctx: Context) -> None:
    """A status-only change (observe) moves the revision; so does a spec change."""
    name, rep = ctx.make("revision")
    ensure(
        DECIMAL.match(revision_of(rep)),
        f"H-15: revision {revision_of(rep)!r} is not a canonical decimal",
    )
    before = rep
    for attempt in range(4):
        response = ctx.observe(name)
        ensure(response.status_code == 200, f"§4 observe: {describe(response)}")
        after = ctx.body(response, "observe")
        ensure(
            DECIMAL.match(revision_of(after)),
            f"H-15: revision {revision_of(after)!r} is not canonical",
        )
        stripped = [
            {**r, "metadata": {k: v for k, v in r["metadata"].items() if k != "revision"}}
            for r in (before, after)
        ]
        if stripped[0] != stripped[1]:
            ensure(
                int(revision_of(after)) > int(revision_of(before)),
                f"H-15/H-19: observe changed the status but revision stayed {revision_of(before)} "
                f"(now {revision_of(after)})",
            )
            ensure(
                generation_of(after) == generation_of(before),
                "H-19: observe changed the generation",
            )
            read = ctx.representation(name, what="after observe")
            ensure(
                revision_of(read) == revision_of(after),
                "H-15: a read after observe shows another revision",
            )
            break
        ensure(
            revision_of(after) == revision_of(before), "H-15: revision moved while nothing changed"
        )
        time.sleep(0.4 * (attempt + 1))
    else:
        raise CheckSkipped("observe never changed the representation; no status-only change seen")
    changed = ctx.change(name, ctx.representation(name))
    ensure(
        int(revision_of(changed)) > int(revision_of(after)),
        f"H-15: a spec change left the revision at {revision_of(changed)}",
    )


@check("etag-is-quoted-revision", "H-16")
def etag_is_quoted_revision(ctx: Context) -> None:
    """Every representation comes with the strong ETag "<revision>"."""
    name, _ = ctx.make("etag")

    def verify(response: httpx.Response, what: str) -> None:
        ensure(response.status_code == 200, f"H-16: {what}: {describe(response)}")
        etag = response.headers.get("etag")
        expected = f'"{revision_of(response.json())}"'
        ensure(etag == expected, f"H-16: {what}: ETag is {etag!r}, expected {expected!r}")

    verify(ctx.read(name), "read")
    verify(ctx.observe(name), "observe")
    ctx.change(name, ctx.representation(name))
    verify(ctx.read(name), "read after an update")


@check("closed-condition-set", "H-17")
def closed_condition_set(ctx: Context) -> None:
    """Condition types and reasons come from the closed portable sets; observedGeneration set."""
    name, rep = ctx.make("conditions")
    reps = [("after create", rep)]
    observed = ctx.observe(name)
    if observed.status_code == 200:
        reps.append(("observe", observed.json()))
    reps.append(("after update", ctx.change(name, ctx.representation(name))))
    seen = 0
    for what, doc in reps:
        status = doc.get("status") or {}
        observed_generation = status.get("observedGeneration")
        if observed_generation is not None:
            ensure(
                DECIMAL.match(str(observed_generation))
                and int(str(observed_generation)) <= int(generation_of(doc)),
                f"H-17: {what}: observedGeneration {observed_generation!r} is not a generation",
            )
        conditions = status.get("conditions") or []
        ensure(isinstance(conditions, list), f"H-17: {what}: status.conditions is not a list")
        for condition in conditions:
            seen += 1
            ensure(
                condition.get("type") in CONDITION_TYPES,
                f"H-17: {what}: condition type {condition.get('type')!r} is not in the closed set",
            )
            ensure(
                condition.get("reason") in PORTABLE_REASONS,
                f"H-17: {what}: condition reason {condition.get('reason')!r} is not a portable "
                "reason (host-internal codes go to hostReason)",
            )
    if not seen:
        raise CheckSkipped("the host reported no conditions; nothing to check")


@check("exact-ref-binding", "H-18")
def exact_ref_binding(ctx: Context) -> None:
    """A resource is invisible under another installed definition of its line."""
    other = ctx.need_sibling()
    name, rep = ctx.make("binding")
    other_spec = ctx.model(other).valid_spec()
    requests = [
        ("read", ctx.read(name, other)),
        ("observe", ctx.observe(name, other)),
        ("update", ctx.update(name, other_spec, generation_of(rep), ref=other)),
        ("delete", ctx.delete(name, ref=other)),
    ]
    for what, response in requests:
        ctx.expect_error(
            response,
            404,
            "resource_not_found",
            "H-18",
            f"{what} under installed {other.definition_version} of a resource bound to "
            f"{ctx.primary.definition_version}",
        )
    ctx.expect_error(
        ctx.read(name, ctx.unknown_version(ctx.primary)),
        404,
        "form_unknown",
        "H-18",
        "read under a FormRef that is not installed",
    )
    unchanged(ctx, name, rep, "H-18", "mutations under another FormRef")


@check("representation-names-the-request", "H-38")
def representation_names_the_request(ctx: Context) -> None:
    """Every representation names the space, name and exact FormRef of its request."""
    name, rep = ctx.make("named")
    reps = [("the read after create", rep)]
    observed = ctx.observe(name)
    ensure(observed.status_code == 200, f"§4 observe: {describe(observed)}")
    reps.append(("observe", ctx.body(observed, "observe")))
    reps.append(("the read after observe", ctx.representation(name, what="after observe")))
    expected = ctx.primary.to_json()
    for what, doc in reps:
        meta = doc.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        for member, asked in (("space", ctx.space), ("name", name)):
            ensure(
                meta.get(member) == asked,
                f"H-38: {what}: metadata.{member} is {meta.get(member)!r}, asked for {asked!r}",
            )
        ensure(
            doc.get("formRef") == expected,
            f"H-38: {what}: formRef is {doc.get('formRef')!r}, asked for {expected!r}",
        )
