"""Which namespace may address which space on which host (brief section 9). Deny by default.

A cluster admin writes the policy as cluster-scoped objects: `TakoformHost`s (where a host is and
which Secret holds its token) and `TakoformSpaceGrant`s (which namespaces, by name or label
selector, may address which spaces, by exact name or shell-style pattern, on one host). A CR
whose namespace holds no grant for its (host, space) gets nothing sent to the host, not even a
read: `access` says why, and names the grant the admin must create. Pure: no kopf, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from .conditions import Reason

#: The name of the implicit host made from the single-host settings (TAKOFORM_HOST_URL...):
#: CRs without spec.hostRef use it when no TakoformHost is marked default.
DEFAULT_HOST = "default"


class InvalidPolicy(ValueError):
    """A TakoformSpaceGrant or TakoformHost that cannot be read (it grants nothing)."""


@dataclass(frozen=True)
class Requirement:
    """One matchExpressions entry of a label selector."""

    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "In":
            return self.key in labels and labels[self.key] in self.values
        if self.operator == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        return False  # unknown operators match nothing (deny)


@dataclass(frozen=True)
class Selector:
    """A Kubernetes label selector: every matchLabels pair and every expression must hold.
    An empty selector matches nothing here (Kubernetes would match everything: a grant to
    every namespace must say so explicitly, with an Exists expression or a pattern)."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if not self.match_labels and not self.match_expressions:
            return False
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.matches(labels) for r in self.match_expressions
        )


@dataclass(frozen=True)
class SpaceGrant:
    """One TakoformSpaceGrant: namespaces (names and/or a selector) x spaces on one host."""

    name: str
    host: str
    spaces: tuple[str, ...]
    namespaces: tuple[str, ...] = ()
    selector: Selector | None = None

    def covers_namespace(self, namespace: str, labels: Mapping[str, str]) -> bool:
        if namespace in self.namespaces:
            return True
        return self.selector is not None and self.selector.matches(labels)

    def covers_space(self, space: str) -> bool:
        """Exact names, or shell-style patterns (*, ?, [..]), case-sensitive like SpaceIDs."""
        return any(fnmatchcase(space, pattern) for pattern in self.spaces)

    def allows(self, host: str, space: str, namespace: str, labels: Mapping[str, str]) -> bool:
        return (
            self.host == host
            and self.covers_space(space)
            and self.covers_namespace(namespace, labels)
        )


@dataclass(frozen=True)
class Denied:
    """Why nothing may be sent for a CR: a Blocked reason and a message with the remedy."""

    reason: Reason
    message: str


def resolve_host(host_ref: str | None, default: str | None) -> str | None:
    """The host a CR addresses: its spec.hostRef, else the default host (None: no default)."""
    return host_ref if host_ref else default


def access(
    *,
    namespace: str,
    namespace_labels: Mapping[str, str],
    host: str | None,
    host_ref: str | None,
    space: str,
    hosts: Iterable[str],
    grants: Iterable[SpaceGrant],
) -> Denied | None:
    """None when a grant lets `namespace` address `space` on `host`; else why not.

    `host` is the resolved host (the recorded one once claimed), `host_ref` what the spec said
    (for the message), `hosts` the names of the hosts the operator knows."""
    known = set(hosts)
    if host is None:
        return Denied(
            Reason.HOST_NOT_FOUND,
            "spec.hostRef is not set and no TakoformHost is marked default (spec.default: true); "
            "nothing is sent. Remedy: set spec.hostRef to a TakoformHost, or ask a cluster admin "
            "to mark one default.",
        )
    if host not in known:
        named = f"spec.hostRef {host_ref!r}" if host_ref else f"the recorded host {host!r}"
        return Denied(
            Reason.HOST_NOT_FOUND,
            f"{named} names no TakoformHost this operator knows (known: "
            f"{', '.join(sorted(known)) or 'none'}); nothing is sent. Remedy: fix spec.hostRef "
            f"(before anything was sent), or ask a cluster admin to create TakoformHost {host!r}.",
        )
    if any(grant.allows(host, space, namespace, namespace_labels) for grant in grants):
        return None
    return Denied(
        Reason.SPACE_NOT_GRANTED,
        f"namespace {namespace!r} has no TakoformSpaceGrant for space {space!r} on host "
        f"{host!r}; nothing is sent to the host, not even a read. Remedy: a cluster admin "
        f"creates the grant: {remedy(namespace, space, host)} -- or, for a CR being deleted, "
        "set spec.deletionPolicy to Orphan to release it without touching the host.",
    )


def remedy(namespace: str, space: str, host: str) -> str:
    """The TakoformSpaceGrant an admin must create, as one line of YAML-ish text."""
    name = f"{namespace}-{space}".lower()
    return (
        f"apiVersion: operator.takoform.io/v1alpha1, kind: TakoformSpaceGrant, "
        f"metadata: {{name: {name}}}, spec: {{hostRef: {host}, spaces: [{space}], "
        f"namespaces: {{names: [{namespace}]}}}}"
    )


# -- reading the objects -----------------------------------------------------------------------


def grant_from_body(body: Mapping[str, Any]) -> SpaceGrant:
    """A TakoformSpaceGrant object as a SpaceGrant; raises InvalidPolicy when unreadable."""
    name = str((body.get("metadata") or {}).get("name") or "")
    spec = body.get("spec") or {}
    try:
        host = spec["hostRef"]
        spaces = tuple(str(s) for s in spec.get("spaces") or ())
        target = spec.get("namespaces") or {}
        names = tuple(str(n) for n in target.get("names") or ())
        selector_doc = target.get("selector")
        selector = _selector(selector_doc) if selector_doc else None
    except (KeyError, TypeError, AttributeError) as exc:
        raise InvalidPolicy(f"TakoformSpaceGrant {name!r} is malformed: {exc!r}") from None
    if not isinstance(host, str) or not host:
        raise InvalidPolicy(f"TakoformSpaceGrant {name!r} has no spec.hostRef")
    return SpaceGrant(name, host, spaces, names, selector)


def _selector(doc: Mapping[str, Any]) -> Selector:
    labels = tuple(sorted((str(k), str(v)) for k, v in (doc.get("matchLabels") or {}).items()))
    expressions = tuple(
        Requirement(str(e["key"]), str(e["operator"]), tuple(str(v) for v in e.get("values") or ()))
        for e in doc.get("matchExpressions") or ()
    )
    return Selector(labels, expressions)
