"""The ownership index keeps the newest thing each CR said: a late watch event cannot take a
recorded claim back."""

from __future__ import annotations

from typing import Any

from takoform_operator.core.ownership import Identity
from takoform_operator.kube.claims import ClaimBook
from takoform_operator.registry_data import load_registry

REGISTRY = load_registry()
REF = next(r for r in REGISTRY.default_creates.values() if r.kind == "Bucket")
IDENTITY = Identity("team-a", REF.line, "logs", "default")


def _body(uid: str, version: str, created: str, status: dict[str, Any] | None = None) -> Any:
    return {
        "apiVersion": REF.line.api_version,
        "kind": REF.line.kind,
        "metadata": {"name": f"cr-{uid}", "namespace": "demo", "uid": uid,
                     "resourceVersion": version, "creationTimestamp": created},
        "spec": {"space": "team-a", "resourceName": "logs", "hostRef": "default",
                 "parameters": {"region": "eu-west-1", "sizeGiB": 10}},
        **({"status": status} if status is not None else {}),
    }  # fmt: skip


CLAIMED = {"formRef": REF.to_json(), "host": "default", "space": "team-a", "name": "logs"}


def test_a_late_event_without_the_claim_does_not_undo_the_claim_written_after_it() -> None:
    book = ClaimBook()
    book.observe(_body("young", "20", "2026-11-30T10:00:00Z"))
    book.observe(_body("young", "22", "2026-11-30T10:00:00Z", CLAIMED))  # our own write
    book.observe(_body("young", "21", "2026-11-30T10:00:00Z"))  # its finalizer's event, late
    book.observe(_body("old", "30", "2026-11-30T09:00:00Z"))  # an older CR naming the same
    claimants = {c.uid: c for c in book.claimants(IDENTITY)}
    assert claimants["young"].claimed, "the recorded claim was forgotten"
    assert not claimants["old"].claimed


def test_a_newer_body_replaces_what_the_cr_named() -> None:
    book = ClaimBook()
    book.observe(_body("cr", "5", "2026-11-30T10:00:00Z", CLAIMED))
    moved = _body("cr", "6", "2026-11-30T10:00:00Z")
    moved["spec"]["resourceName"] = "other"
    book.observe(moved)  # e.g. a restored CR whose status was dropped
    assert book.claimants(IDENTITY) == ()
    assert len(book.claimants(Identity("team-a", REF.line, "other", "default"))) == 1
