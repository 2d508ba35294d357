"""Which conformance check each misbehaviour switch of the reference host must make fail.

Each switch breaks exactly the H-rule(s) named here; the named check proves that rule.
"""

from __future__ import annotations

#: switch -> (check that must fail, H-rules the switch breaks)
SWITCH_TO_CHECK: dict[str, tuple[str, tuple[str, ...]]] = {
    "accept-any-token": ("auth-required", ("H-3",)),
    "plain-text-errors": ("error-body-shape", ("H-2",)),
    "lenient-content-type": ("bad-input-stores-nothing", ("H-1",)),
    "auto-create-spaces": ("unknown-space-refused", ("H-6",)),
    "default-missing-formref": ("form-ref-members-required", ("H-7",)),
    "match-group-kind": ("exact-form-ref-fails-closed-on-unknown-definition", ("H-8",)),
    "serve-wrong-schema": ("definition-schema-matches-digest", ("H-9",)),
    "package-digest-in-identity": ("package-digest-substitution", ("H-10",)),
    "unstable-uid": ("uid-stability", ("H-12",)),
    "reuse-uid-on-recreate": ("delete-recreate-uid-change", ("H-13",)),
    "bump-generation-on-status-change": ("generation-only-on-spec-change", ("H-14", "H-19")),
    "static-revision-on-status-change": ("revision-on-status-change", ("H-15", "H-19")),
    "weak-etag": ("etag-is-quoted-revision", ("H-16",)),
    "host-internal-condition-reason": ("closed-condition-set", ("H-17",)),
    "serve-under-any-installed-ref": ("exact-ref-binding", ("H-18",)),
    "visible-before-commit": ("uncommitted-invisible", ("H-20", "H-36")),
    "ignore-if-none-match": ("create-fence", ("H-21",)),
    "store-undeclared-fields": ("exact-definition-validation", ("H-22",)),
    "ignore-generation-fence": ("stale-generation-fence", ("H-23",)),
    "ignore-if-match": ("stale-revision-fence", ("H-24",)),
    "ignore-expected-uid": ("expected-uid-fence", ("H-25",)),
    "allow-concurrent-create": ("concurrent-create-refused", ("H-26",)),
    "ignore-defaults": ("omitted-field-default", ("H-27",)),
    "ignore-idempotency-key": ("idempotency-key-replays-original", ("H-28",)),
    "accept-key-reuse": ("idempotency-key-reuse-refused", ("H-29",)),
    "drop-idempotency-key": ("idempotency-key-recorded", ("H-30",)),
    "omit-result-uid": ("operation-record-shape", ("H-31",)),
    "failed-create-leaves-resource": ("failed-operation-reports-error", ("H-32",)),
    "forget-settled-operations": ("operation-resumable-after-settlement", ("H-33",)),
    "unstable-terminal-body": ("operation-resumable-after-settlement", ("H-33",)),
    "expiry-deletes-resource": ("operation-expiry-keeps-resource", ("H-34",)),
    "unknown-error-codes": ("error-codes-closed", ("H-37",)),
    "serve-another-name": ("representation-names-the-request", ("H-38",)),
    "serve-another-space": ("representation-names-the-request", ("H-38",)),
    "serve-malformed-formref": ("representation-names-the-request", ("H-38",)),
    "misstatus-not-found": ("error-codes-closed", ("H-37",)),
    "record-another-name": ("operation-record-shape", ("H-31",)),
    "record-malformed-formref": ("operation-record-shape", ("H-31",)),
    "echo-sensitive-outputs": ("errors-keep-sensitive-outputs", ("H-39",)),
    "oversized-errors": ("answers-are-bounded", ("H-40",)),
}

#: The check names issue 3 and decision 0017 rule 8 require by name.
REQUIRED_NAMES = sorted(
    {check for check, _ in SWITCH_TO_CHECK.values()} | {"accepted-mutation-durable"}
)
