"""The status of each TakoformHost, probed periodically: can the operator reach the host with
its token, and which FormRefs does the host serve next to the ones this build supports.

The probe is `GET /forms` with the host's token; its answer never carries the token, and
neither does anything written here.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from takoform_operator.core.limits import HOST_FORMS_MAX_ITEMS, condition_message
from takoform_operator.core.registry import Registry
from takoform_operator.core.tenancy import GROUP, HOST_PLURAL, VERSION, HostConfig
from takoform_operator.host_port import (
    HostCertificateUntrusted,
    HostError,
    HostInsecure,
    HostRejected,
    HostUnavailable,
    SecretNotFound,
    SecretNotOptedIn,
    SecretNotOptedInForUrl,
)
from takoform_operator.kube.api import KubeApi
from takoform_spec.host_api import ErrorCode
from takoform_spec.identity import FormRef


class Probe(Protocol):
    async def list_forms(self) -> list[FormRef]: ...


class Hosts(Protocol):
    def configs(self) -> list[HostConfig]: ...

    def prober(self, name: str) -> Probe: ...


logger = logging.getLogger("takoform_operator")


async def probe(pool: Hosts, config: HostConfig) -> tuple[bool, str, str, list[FormRef]]:
    """(ready, reason, message, served FormRefs) of one host."""
    try:
        served = await pool.prober(config.name).list_forms()
    except HostInsecure as exc:
        return False, "InsecureUrl", str(exc), []
    except SecretNotOptedInForUrl as exc:
        return False, "SecretNotOptedInForUrl", str(exc), []
    except SecretNotOptedIn as exc:
        return False, "SecretNotOptedIn", str(exc), []
    except SecretNotFound as exc:
        return False, "SecretNotFound", str(exc), []
    except HostCertificateUntrusted as exc:
        return False, "CertificateUntrusted", str(exc)[:300], []
    except HostRejected as exc:
        if exc.code == ErrorCode.UNAUTHENTICATED:
            return False, "Unauthenticated", "the host refused the token (401)", []
        return False, "HostRejected", f"the host refused the probe: {exc.code}", []
    except HostUnavailable as exc:
        return False, "Unreachable", str(exc)[:300], []
    except HostError as exc:
        return False, "InvalidHost", str(exc)[:300], []
    return True, "Reachable", f"{len(served)} FormRefs served", served


def host_status(
    config: HostConfig,
    generation: int,
    result: tuple[bool, str, str, list[FormRef]],
    registry: Registry,
    previous: Mapping[str, Any] | None,
    now: str,
) -> dict[str, Any]:
    ready, reason, message, served = result
    status = "True" if ready else "False"
    since = now
    if previous is not None and previous.get("status") == status:
        since = str(previous.get("lastTransitionTime") or now)
    refs = {*served, *registry.supported}
    forms = [
        {
            **ref.to_json(),
            "served": ref in served,
            "supported": registry.is_supported(ref),
        }
        for ref in sorted(refs, key=lambda r: (r.api_version, r.kind, r.definition_version))
    ][:HOST_FORMS_MAX_ITEMS]  # the CRD's maxItems: a host serving more still gets its status
    condition = {
        "type": "Ready",
        "status": status,
        "reason": reason,
        "message": condition_message(message),
        "lastTransitionTime": since,
        "observedGeneration": generation,
    }
    return {
        "conditions": [condition],
        "observedGeneration": generation,
        "lastProbeTime": now,
        "forms": forms if ready else None,
    }


class HostStatusWriter:
    """Merge-patches takoformhosts/status."""

    def __init__(self, api: KubeApi) -> None:
        self._api = api

    async def write(self, name: str, status: Mapping[str, Any]) -> None:
        await self._api.request(
            "PATCH",
            f"/apis/{GROUP}/{VERSION}/{HOST_PLURAL}/{name}/status",
            {"status": dict(status)},
            content_type="application/merge-patch+json",
        )


async def refresh_forever(
    pool: Hosts,
    generations: Callable[[], Mapping[str, int]],
    registry: Registry,
    writer: HostStatusWriter,
    interval: float,
) -> None:
    """Probe every TakoformHost and write its status, every `interval` seconds."""
    last: dict[str, Mapping[str, Any]] = {}
    while True:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        known = generations()
        for config in pool.configs():
            try:
                result = await probe(pool, config)
                status = host_status(
                    config, known.get(config.name, 0), result, registry, last.get(config.name), now
                )
                await writer.write(config.name, status)
                last[config.name] = status["conditions"][0]
            except Exception as exc:  # one host's trouble never stops the others
                logger.warning(
                    "status of TakoformHost %s not written: %s",
                    config.name,
                    exc,
                    extra={
                        "cr": {"kind": "TakoformHost", "name": config.name, "host": config.name}
                    },
                )
        await asyncio.sleep(interval)
