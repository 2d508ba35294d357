"""§3 Forms: exact FormRefs, definitions by exact ref, package digests as evidence only."""

from __future__ import annotations

from takoform_spec.canonical import canonical_json, sha256_digest
from takoform_spec.identity import FormRef

from ..answers import describe
from ..context import Context
from ..outcomes import CheckSkipped, ensure
from .common import Check, generation_of, registrar, uid_of, unchanged

CHECKS: list[Check] = []
check = registrar(CHECKS)


@check("form-ref-members-required", "H-7")
def form_ref_members_required(ctx: Context) -> None:
    """Every endpoint that needs a FormRef refuses a query lacking definitionVersion or digest."""
    ref = ctx.primary
    partials = {
        "without definitionVersion": {"schemaDigest": ref.schema_digest},
        "without schemaDigest": {"definitionVersion": ref.definition_version},
        "without both": {},
    }
    name, rep = ctx.make("members")
    spec = rep["spec"]
    for label, params in partials.items():
        new = ctx.name("members")
        ctx.track(new, ref, None)
        requests = [
            ("availability", ctx.http.get(ctx.form_path(ref, "availability"), params=params)),
            ("definition read", ctx.http.get(ctx.form_path(ref, "definition"), params=params)),
            ("resource read", ctx.http.get(ctx.resource_path(name), params=params)),
            ("observe", ctx.http.post(ctx.resource_path(name) + "/observe", params=params)),
            (
                "create",
                ctx.http.put(
                    ctx.resource_path(new),
                    params=params,
                    json={"spec": spec},
                    headers={"If-None-Match": "*"},
                ),
            ),
            (
                "update",
                ctx.http.put(
                    ctx.resource_path(name),
                    params=params,
                    json={"spec": ctx.model().changed(spec)},
                    headers={"Takoform-Expected-Generation": generation_of(rep)},
                ),
            ),
            ("delete", ctx.http.delete(ctx.resource_path(name), params=params)),
        ]
        for what, response in requests:
            ctx.expect_error(response, 400, "invalid_request", "H-7", f"{what} {label}")
        ctx.expect_absent(new, "H-7", f"create {label} stored something")
        unchanged(ctx, name, rep, "H-7", f"update/delete {label}")


@check("exact-form-ref-fails-closed-on-unknown-definition", "H-8")
def exact_form_ref_fails_closed(ctx: Context) -> None:
    """0017 rule 8: an unknown definitionVersion or schemaDigest is form_unknown everywhere."""
    ref = ctx.primary
    ok = ctx.http.get(ctx.form_path(ref, "availability"), params=ctx.query(ref))
    ensure(ok.status_code == 200, f"H-8: availability of installed {ref}: {describe(ok)}")
    doc = ctx.body(ok, "availability")
    ensure(
        doc.get("available") is True and doc.get("formRef") == ref.to_json(),
        f"§3: availability of an installed FormRef must be {{formRef, available: true}}: {doc}",
    )
    name, rep = ctx.make("exactref")
    unknowns = [
        ("an unknown definitionVersion", ctx.unknown_version(ref)),
        ("an unknown schemaDigest", ctx.unknown_digest(ref)),
    ]
    if ctx.sibling is not None:
        # Each member is installed, but not together: only whole-ref matching refuses it.
        mixed = FormRef(
            ref.api_version, ref.kind, ctx.sibling.definition_version, ref.schema_digest
        )
        unknowns.append(("another installed version with this version's digest", mixed))
    for label, bad in unknowns:
        query = ctx.query(bad)
        new = ctx.name("exactref")
        requests = [
            ("availability", ctx.http.get(ctx.form_path(bad, "availability"), params=query)),
            ("definition read", ctx.http.get(ctx.form_path(bad, "definition"), params=query)),
            ("resource read", ctx.read(name, bad)),
            ("observe", ctx.observe(name, bad)),
            ("update", ctx.update(name, rep["spec"], generation_of(rep), ref=bad)),
            ("delete", ctx.delete(name, ref=bad)),
            ("create", ctx.create(new, rep["spec"], ref=bad)),
        ]
        for what, response in requests:
            ctx.expect_error(
                response,
                404,
                "form_unknown",
                "H-8",
                f"{what} with {label} ({bad.definition_version})",
            )
        ctx.expect_absent(new, "H-8", f"create with {label} stored a resource")
        unchanged(ctx, name, rep, "H-8", f"update/delete with {label}")


@check("definition-schema-matches-digest", "H-9")
def definition_schema_matches_digest(ctx: Context) -> None:
    """Each installed definition's schema hashes (canonical JSON, SHA-256) to its schemaDigest."""
    for form in ctx.installed:
        ref = form.ref
        response = ctx.http.get(ctx.form_path(ref, "definition"), params=ctx.query(ref))
        ensure(response.status_code == 200, f"H-9: definition read of {ref}: {describe(response)}")
        doc = ctx.body(response, f"definition of {ref}")
        ensure(
            doc.get("formRef") == ref.to_json(),
            f"H-9: definition read of {ref} names formRef {doc.get('formRef')}",
        )
        schema = doc.get("schema")
        ensure(isinstance(schema, dict), f"H-9: definition of {ref} has no schema object")
        digest = sha256_digest(canonical_json(schema))
        ensure(
            digest == ref.schema_digest,
            f"H-9: the schema served for {ref} hashes to {digest}, not its schemaDigest",
        )
        ensure(
            isinstance(doc.get("packageDigests"), list) and doc["packageDigests"],
            f"§3: definition read of {ref} lacks packageDigests",
        )


@check("package-digest-substitution", "H-10", "H-12", admin="required")
def package_digest_substitution(ctx: Context) -> None:
    """A FormRef served by another package keeps its resources readable, updatable, deletable."""
    ctx.need_admin("switching the package that serves a FormRef")
    candidates = [f for f in ctx.installed if len(set(f.package_digests)) >= 2]
    if not candidates:
        raise CheckSkipped("no FormRef is installed from two packages (GET /v1alpha3/forms)")
    candidates.sort(key=lambda f: f.ref.line != ctx.primary.line)
    form = candidates[0]
    ref = form.ref
    name, rep = ctx.make("package", ref=ref)
    recorded = rep["metadata"].get("packageDigest")
    original = recorded if recorded in form.package_digests else form.package_digests[0]
    other = next(d for d in form.package_digests if d != original)
    ctx.admin("POST", "/packages/activate", {"formRef": ref.to_json(), "packageDigest": other})
    try:
        after = ctx.representation(name, ref, f"after switching {ref} to package {other}")
        ensure(uid_of(after) == uid_of(rep), "H-12: the uid changed with the package")
        ensure(after.get("formRef") == ref.to_json(), "H-10: the formRef changed with the package")
        observed = ctx.observe(name, ref)
        ensure(observed.status_code == 200, f"H-10: observe after the switch: {describe(observed)}")
        changed = ctx.change(name, after, ref)
        ensure(
            uid_of(changed) == uid_of(rep), "H-12: the uid changed on an update after the switch"
        )
        ctx.settle(ctx.delete(name, ref=ref), "H-10: delete after the package switch")
        ctx.expect_absent(name, "H-10", "after delete through the same FormRef", ref)
        ctx.make("package", ref=ref)  # and new resources still come to be under it
    finally:
        ctx.admin(
            "POST", "/packages/activate", {"formRef": ref.to_json(), "packageDigest": original}
        )
