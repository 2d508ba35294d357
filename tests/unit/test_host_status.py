"""The TakoformHost status: Ready with the reason the probe found, FormRefs served vs supported,
and never a token."""

from __future__ import annotations

import asyncio

from takoform_operator.core.tenancy import HostConfig, SecretKeyRef
from takoform_operator.host_port import HostUnavailable, SecretNotFound, Unauthenticated
from takoform_operator.kube.host_status import host_status, probe
from takoform_operator.registry_data import load_registry
from takoform_spec.host_api import ErrorCode
from takoform_spec.identity import FormRef

REGISTRY = load_registry()
CONFIG = HostConfig("prod", "http://h", SecretKeyRef("prod-token", "token"))
SUPPORTED = next(iter(REGISTRY.supported))
FOREIGN = FormRef("storage.takoform.io/v1", "Bucket", "9.9.9", "sha256:" + "0" * 64)


class Hosts:
    def __init__(self, answer: list[FormRef] | Exception) -> None:
        self.answer = answer

    def configs(self) -> list[HostConfig]:
        return [CONFIG]

    def prober(self, name: str) -> Hosts:
        return self

    async def list_forms(self) -> list[FormRef]:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _probe(answer: list[FormRef] | Exception) -> tuple[bool, str, str, list[FormRef]]:
    return asyncio.run(probe(Hosts(answer), CONFIG))


def test_probe_reasons() -> None:
    assert _probe([SUPPORTED])[:2] == (True, "Reachable")
    assert _probe(HostUnavailable("connection refused"))[:2] == (False, "Unreachable")
    refused = Unauthenticated(401, ErrorCode.UNAUTHENTICATED, "wrong bearer token", {})
    assert _probe(refused)[:2] == (False, "Unauthenticated")
    assert _probe(SecretNotFound("Secret 'prod-token' not found"))[:2] == (False, "SecretNotFound")


def test_status_lists_served_and_supported_forms_and_keeps_the_transition_time() -> None:
    result = _probe([SUPPORTED, FOREIGN])
    first = host_status(CONFIG, 3, result, REGISTRY, None, "2026-11-30T10:00:00Z")
    forms = {(f["definitionVersion"], f["kind"]): f for f in first["forms"]}
    assert forms[("9.9.9", "Bucket")] == {
        **FOREIGN.to_json(),
        "served": True,
        "supported": False,
    }
    assert all(f["supported"] for f in first["forms"] if f["definitionVersion"] != "9.9.9")
    assert first["observedGeneration"] == 3
    later = host_status(CONFIG, 3, result, REGISTRY, first["conditions"][0], "2026-11-30T10:05:00Z")
    assert later["conditions"][0]["lastTransitionTime"] == "2026-11-30T10:00:00Z"
    down = host_status(CONFIG, 3, _probe(HostUnavailable("x")), REGISTRY, None, "t")
    assert down["conditions"][0]["status"] == "False" and down["forms"] is None
