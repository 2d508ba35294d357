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

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes import client as k8s

from takoform_operator.core.binding import BINDING_PLURAL
from takoform_operator.core.registry import Registry
from takoform_operator.core.tenancy import GRANT_PLURAL, GROUP, HOST_PLURAL, VERSION
from takoform_operator.kube.client_config import api_client, load_kube_config

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


def _served_by(api: k8s.CustomObjectsApi) -> Callable[[str, str], set[str] | None]:
    def served(group: str, version: str) -> set[str] | None:
        try:
            answer: Any = api.get_api_resources(group, version)
        except Exception:  # not served yet, or unreachable: both mean "wait"
            return None
        return {str(r.name) for r in (answer.resources if answer is not None else None) or ()}

    return served


def wait_until_served(
    kinds: Iterable[Kind], timeout: float = 60.0, interval: float = 0.5
) -> list[Kind]:
    """Blocking (run it in a thread). Returns the kinds still missing at the end ([] once all
    are served)."""
    wanted = sorted(set(kinds))
    load_kube_config()
    served = _served_by(k8s.CustomObjectsApi(api_client()))
    deadline = time.monotonic() + timeout
    said = False
    while True:
        missing = missing_kinds(wanted, served)
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
        time.sleep(interval)
