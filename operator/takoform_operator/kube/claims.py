"""The cluster-wide ownership index: which CRs name which host identity.

Fed with every CR body the operator sees (watch events, and the status it has just written
itself, so its own claims count before their watch events arrive); read by the reconcile of each
CR to decide ownership (core.ownership). No kopf and no API calls.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from takoform_operator.core.ownership import Claimant, Identity, owner
from takoform_operator.core.tenancy import DEFAULT_HOST
from takoform_operator.kube.crs import ANY_DEFAULT, claimant_of
from takoform_operator.kube.freshness import older, resource_version


class ClaimBook:
    """CR uid -> (identity, claimant), with a reverse map for lookups by identity.

    An unclaimed CR without spec.hostRef names the default host, whichever it is when asked:
    `default_host` says which, so it counts as a claimant of that host's identities."""

    def __init__(self, default_host: Callable[[], str | None] = lambda: DEFAULT_HOST) -> None:
        self._default_host = default_host
        self._by_uid: dict[str, tuple[Identity, Claimant]] = {}
        self._by_identity: dict[Identity, dict[str, Claimant]] = {}
        #: CR uid -> the resourceVersion of the newest body seen (kube.freshness).
        self._versions: dict[str, str] = {}

    def observe(self, body: Mapping[str, Any]) -> None:
        """Record what this CR body names now (replacing what it named before), unless the
        body is older than the last one seen: a late watch event must not undo a claim the
        operator has just written (kube.freshness)."""
        uid = str((body.get("metadata") or {}).get("uid", ""))
        version = resource_version(body)
        if older(version, self._versions.get(uid, "")):
            return
        self.forget(uid)
        self._versions[uid] = version
        entry = claimant_of(body)
        if entry is None:
            return
        identity, claimant = entry
        self._by_uid[uid] = entry
        self._by_identity.setdefault(identity, {})[uid] = claimant

    def forget(self, uid: str) -> Sequence[Claimant]:
        """The CR is gone (or names nothing any more): it releases what it named. Returns the
        CRs that may own the identity now: the others naming it, when the CR that went was
        its owner; nobody's standing changes when a non-owner goes."""
        self._versions.pop(uid, None)
        old = self._by_uid.pop(uid, None)
        if old is None:
            return ()
        holders = self._by_identity.get(old[0], {})
        was_owner = (winner := owner(holders.values())) is not None and winner.uid == uid
        holders.pop(uid, None)
        if not holders:
            self._by_identity.pop(old[0], None)
        return tuple(holders.values()) if was_owner else ()

    def claimants(self, identity: Identity) -> Sequence[Claimant]:
        found = dict(self._by_identity.get(identity, {}))
        if identity.host != ANY_DEFAULT and identity.host == self._default_host():
            found.update(self._by_identity.get(replace(identity, host=ANY_DEFAULT), {}))
        return tuple(found.values())
