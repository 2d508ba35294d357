"""Wait, before kopf starts, until the API server serves every kind the operator watches.

kopf resolves the kinds it watches once, at start-up (and again only when a CRD changes). An
operator started while the API server is still initialising its CRDs' storage (right after the
API server itself started, or after the CRDs were applied) finds some kinds missing, logs
"Unresolved resources cannot be served" and never watches them: the CRs of those kinds are never
reconciled by that process. Found by the chaos soak, where replicas restart while the API server
does. The wait ends as soon as discovery lists them all; after `timeout` seconds it says which
are missing and lets kopf start anyway (a kind whose CRD is really absent is kopf's warning).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable

from takoform_operator.core.binding import BINDING_PLURAL
from takoform_operator.core.registry import Registry
from takoform_operator.core.tenancy import GRANT_PLURAL, GROUP, HOST_PLURAL, VERSION
from takoform_operator.kube.api import ApiError, KubeApi

logger = logging.getLogger("takoform_operator.discovery")

#: (group, version, plural) of a watched kind.
Kind = tuple[str, str, str]


def watched_kinds(registry: Registry) -> list[Kind]:
    """Every kind the operator watches: each Form line's, the bindings' (kube.binding_watch),
    hosts' and grants'."""
    lines = [(line.group, line.version, line.plural) for line in registry.lines()]
    own = [(GROUP, VERSION, plural) for plural in (BINDING_PLURAL, HOST_PLURAL, GRANT_PLURAL)]
    return [*lines, *own]


def missing_kinds(
    kinds: Iterable[Kind], served: Callable[[str, str], set[str] | None]
) -> list[Kind]:
    """The kinds whose group/version discovery (`served`: the plurals it lists, None when it
    is not served at all) does not list them."""
    missing: list[Kind] = []
    lists: dict[tuple[str, str], set[str] | None] = {}
    for group, version, plural in kinds:
        if (group, version) not in lists:
            lists[(group, version)] = served(group, version)
        if plural not in (lists[(group, version)] or set()):
            missing.append((group, version, plural))
    return missing


def _served_by(api: KubeApi) -> Callable[[str, str], Awaitable[set[str] | None]]:
    async def served(group: str, version: str) -> set[str] | None:
        try:
            answer = await api.request("GET", f"/apis/{group}/{version}")
        except ApiError:  # not served yet, or unreachable: both mean "wait"
            return None
        resources = answer.get("resources") if isinstance(answer, dict) else None
        return {str(r.get("name")) for r in resources or () if isinstance(r, dict)}

    return served


def _listed(
    lists: dict[tuple[str, str], set[str] | None], group: str, version: str
) -> set[str] | None:
    return lists[(group, version)]


async def wait_until_served(
    api: KubeApi, kinds: Iterable[Kind], timeout: float = 60.0, interval: float = 0.5
) -> list[Kind]:
    """Returns the kinds still missing at the end ([] once all are served)."""
    wanted = sorted(set(kinds))
    served = _served_by(api)
    deadline = time.monotonic() + timeout
    said = False
    while True:
        lists = {(g, v): await served(g, v) for g, v in {(g, v) for g, v, _ in wanted}}
        missing = missing_kinds(wanted, functools.partial(_listed, lists))
        if not missing:
            if said:
                logger.info("the API server serves every watched kind now")
            return []
        if time.monotonic() >= deadline:
            logger.error(
                "the API server does not serve %s after %.0f s; starting anyway: CRs of these "
                "kinds are not reconciled until their CRDs are applied (make crds-upgrade)",
                ", ".join(f"{p}.{g}/{v}" for g, v, p in missing),
                timeout,
            )
            return missing
        if not said:
            logger.info(
                "waiting until the API server serves %s", ", ".join(p for _, _, p in missing)
            )
            said = True
        await asyncio.sleep(interval)
