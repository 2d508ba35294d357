"""Tenancy: which namespace may address which space on which host. Deny by default, decided
before anything is sent (brief section 9)."""

from __future__ import annotations

import asyncio
import json
import shlex
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import cr_body
from looks import look_once
from memory_bindings import MemoryBindings

from takoform_operator.core import limits
from takoform_operator.core.conditions import Reason
from takoform_operator.core.state import Requested
from takoform_operator.core.tenancy import (
    CREDENTIAL_ANNOTATION,
    InvalidPolicy,
    Requirement,
    Selector,
    SpaceGrant,
    access,
    credential_entries,
    credential_refusal,
    grant_from_body,
    grant_status,
    literal_space,
    remedy,
    too_broad,
)
from takoform_operator.registry_data import load_registry

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = load_registry()
REF = next(r for r in REGISTRY.default_creates.values() if r.kind == "Bucket")
TEAM = Selector((("team", "a"),))
GRANTS = (
    SpaceGrant("exact", "prod", ("team-a",), namespaces=("ns-a",)),
    SpaceGrant("pattern", "prod", ("shared-*", "tmp-?"), namespaces=("ns-a", "ns-b")),
    SpaceGrant("by-label", "prod", ("labelled",), selector=TEAM),
    SpaceGrant(
        "expressions",
        "staging",
        ("*",),
        selector=Selector((), (Requirement("env", "In", ("dev", "test")),)),
    ),
    SpaceGrant("empty-selector", "prod", ("nobody",), selector=Selector()),
)


@pytest.mark.parametrize(
    ("namespace", "labels", "host", "space", "expected"),
    [
        # exact names
        ("ns-a", {}, "prod", "team-a", None),
        ("ns-b", {}, "prod", "team-a", Reason.SPACE_NOT_GRANTED),
        ("ns-a", {}, "prod", "team-b", Reason.SPACE_NOT_GRANTED),
        ("ns-a", {}, "prod", "Team-a", Reason.SPACE_NOT_GRANTED),  # SpaceIDs are case-sensitive
        # patterns
        ("ns-b", {}, "prod", "shared-logs", None),
        ("ns-b", {}, "prod", "tmp-1", None),
        ("ns-b", {}, "prod", "tmp-12", Reason.SPACE_NOT_GRANTED),
        ("ns-c", {}, "prod", "shared-logs", Reason.SPACE_NOT_GRANTED),
        # selectors
        ("any", {"team": "a"}, "prod", "labelled", None),
        ("any", {"team": "b"}, "prod", "labelled", Reason.SPACE_NOT_GRANTED),
        ("any", {}, "prod", "labelled", Reason.SPACE_NOT_GRANTED),
        ("any", {"env": "dev"}, "staging", "whatever", None),
        ("any", {"env": "prod"}, "staging", "whatever", Reason.SPACE_NOT_GRANTED),
        ("any", {}, "prod", "nobody", Reason.SPACE_NOT_GRANTED),  # empty selector: nobody
        # wrong host: a grant is for one host only
        ("ns-a", {}, "staging", "team-a", Reason.SPACE_NOT_GRANTED),
        ("any", {"env": "dev"}, "prod", "whatever", Reason.SPACE_NOT_GRANTED),
        # unknown host, no host at all
        ("ns-a", {}, "elsewhere", "team-a", Reason.SPACE_NOT_GRANTED),  # like an ungranted one
        ("ns-a", {}, None, "team-a", Reason.HOST_NOT_FOUND),
    ],
)
def test_access_is_granted_only_by_a_matching_grant(
    namespace: str, labels: dict[str, str], host: str | None, space: str, expected: Reason | None
) -> None:
    denied = access(
        namespace=namespace,
        namespace_labels=labels,
        host=host,
        host_ref=host,
        space=space,
        hosts=("prod", "staging"),
        grants=GRANTS,
    )
    assert (denied.reason if denied else None) == expected


def test_no_grant_at_all_denies_and_names_namespace_space_host_and_the_grant_to_create() -> None:
    denied = access(
        namespace="ns-x",
        namespace_labels={},
        host="prod",
        host_ref=None,
        space="team-z",
        hosts=("prod",),
        grants=(),
    )
    assert denied is not None and denied.reason is Reason.SPACE_NOT_GRANTED
    for word in ("'ns-x'", "'team-z'", "'prod'"):
        assert word in denied.message
    assert denied.remedies[0].command == remedy("ns-x", "team-z", "prod")
    assert "TakoformSpaceGrant" in remedy("ns-x", "team-z", "prod")


def _printed_grant(command: str) -> dict[str, Any]:
    """The TakoformSpaceGrant a remedy's `echo '<json>' | kubectl create -f -` creates."""
    words = shlex.split(command)
    assert words[0] == "echo" and words[2:] == ["|", "kubectl", "create", "-f", "-"]
    return dict(json.loads(words[1]))


@pytest.mark.parametrize(
    ("space", "others"),
    [
        ("*", ("team-a", "", "x*")),
        ("team-?", ("team-a", "team-")),
        ("team-[ab]", ("team-a", "team-b")),
        ("[!x]", ("a", "!")),
        ("a[", ("a", "a[[")),
        ("a]", ("a",)),
        ("[*?]", ("*", "?", "[?]")),
        ("team-a", ("team-b",)),
    ],
)
def test_the_printed_grant_names_exactly_the_space_never_a_pattern(
    space: str, others: tuple[str, ...]
) -> None:
    """Grants treat *, ? and [..] as patterns: the remedy escapes them, so the grant an admin
    pastes opens the one space the CR names, never every space it happens to match."""
    printed = _printed_grant(remedy("ns-a", space, "prod"))
    grant = grant_from_body(printed)
    assert grant.covers_space(space)
    for other in others:
        assert not grant.covers_space(other), other
    assert grant.namespaces == ("ns-a",) and grant.host == "prod"


def test_a_literal_space_of_any_length_fits_the_grant_crd() -> None:
    crd = yaml.safe_load((ROOT / "crds/takoformspacegrants.operator.takoform.io.yaml").read_text())
    spaces = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["spaces"]
    longest = literal_space("[" * limits.SPACE_MAX_LENGTH)
    assert len(longest) == spaces["items"]["maxLength"]


@pytest.mark.parametrize(
    ("marked_default", "says"),
    [
        ((), "no TakoformHost is marked default"),
        (("prod", "staging"), "2 TakoformHosts are marked default, so none is"),
    ],
)
def test_without_a_host_the_message_says_why_none_is_the_default(
    marked_default: tuple[str, ...], says: str
) -> None:
    denied = access(
        namespace="ns-a",
        namespace_labels={},
        host=None,
        host_ref=None,
        space="team-a",
        hosts=("prod", "staging"),
        grants=GRANTS,
        marked_default=marked_default,
    )
    assert denied is not None and denied.reason is Reason.HOST_NOT_FOUND
    assert says in denied.message
    assert "prod" not in denied.message and "staging" not in denied.message, "not listed"


def _denied(host: str, hosts: Iterable[str], grants: Iterable[SpaceGrant] = GRANTS) -> Any:
    return access(
        namespace="ns-x",
        namespace_labels={},
        host=host,
        host_ref=host,
        space="team-a",
        hosts=hosts,
        grants=grants,
        obj="buckets.storage.takoform.io/logs -n ns-x",
    )


def test_an_unknown_host_answers_like_an_ungranted_one() -> None:
    """A tenant cannot tell which host names exist: naming a host there is none of is answered
    as naming a host its namespace holds no grant for, word for word."""
    unknown = _denied("nowhere", ("prod", "secret-staging"))
    ungranted = _denied("secret-staging", ("prod", "secret-staging"))
    assert unknown is not None and ungranted is not None
    assert unknown.reason is ungranted.reason is Reason.SPACE_NOT_GRANTED
    assert unknown.message == ungranted.message.replace("secret-staging", "nowhere")
    assert [r.does for r in unknown.remedies] == [r.does for r in ungranted.remedies]
    assert "prod" not in unknown.message


def test_a_granted_host_that_is_gone_says_so() -> None:
    """The namespace holds a grant for the host: its admin named that host to it, so the
    operator may say the TakoformHost is missing."""
    grants = (SpaceGrant("g", "gone", ("team-a",), namespaces=("ns-x",)),)
    denied = _denied("gone", ("prod",), grants)
    assert denied is not None and denied.reason is Reason.HOST_NOT_FOUND
    assert "'gone'" in denied.message and "prod" not in denied.message


@pytest.mark.parametrize(
    ("operator", "values", "labels", "matches"),
    [
        ("In", ("a",), {"k": "a"}, True),
        ("In", ("a",), {}, False),
        ("NotIn", ("a",), {"k": "b"}, True),
        ("NotIn", ("a",), {}, True),
        ("NotIn", ("a",), {"k": "a"}, False),
        ("Exists", (), {"k": ""}, True),
        ("Exists", (), {}, False),
        ("DoesNotExist", (), {}, True),
        ("DoesNotExist", (), {"k": "x"}, False),
        ("Bogus", (), {"k": "x"}, False),
    ],
)
def test_label_selector_requirements(
    operator: str, values: tuple[str, ...], labels: dict[str, str], matches: bool
) -> None:
    assert Selector((), (Requirement("k", operator, values),)).matches(labels) is matches


def test_grant_objects_are_read_and_malformed_ones_grant_nothing() -> None:
    body = {
        "metadata": {"name": "g"},
        "spec": {
            "hostRef": "prod",
            "spaces": ["team-*"],
            "namespaces": {
                "names": ["a"],
                "selector": {
                    "matchLabels": {"team": "a"},
                    "matchExpressions": [{"key": "env", "operator": "Exists"}],
                },
            },
        },
    }
    grant = grant_from_body(body)
    assert grant == SpaceGrant(
        "g",
        "prod",
        ("team-*",),
        ("a",),
        Selector((("team", "a"),), (Requirement("env", "Exists"),)),
    )
    with pytest.raises(InvalidPolicy):
        grant_from_body({"metadata": {"name": "bad"}, "spec": {"spaces": ["x"]}})


# -- the gate in the reconcile of a CR body ------------------------------------------------


class RecordingPort:
    """A host port that records every call: the gate must keep it silent."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            raise AssertionError(f"unexpected host call {name}")

        return call


class FakeTenancy:
    def __init__(self, grants: Iterable[SpaceGrant], default: str | None = "prod") -> None:
        self._grants = tuple(grants)
        self._default = default
        self.ports = {"prod": RecordingPort(), "staging": RecordingPort()}

    def default_host(self) -> str | None:
        return self._default

    def marked_default(self) -> Collection[str]:
        return () if self._default is None else (self._default,)

    def hosts(self) -> Collection[str]:
        return tuple(self.ports)

    def grants(self) -> Iterable[SpaceGrant]:
        return self._grants

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        return {}

    def namespace_uid(self, namespace: str) -> str:
        return ""

    def port(self, host: str, namespace: str = "") -> Any:
        return self.ports[host]

    def calls(self) -> list[str]:
        return [c for port in self.ports.values() for c in port.calls]


def _body(*, status: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    """A Bucket CR of namespace ns-a."""
    return cr_body(namespace="ns-a", status=status or {}, **fields)


def _claimed_status(host: str = "prod", host_ref: str | None = None) -> dict[str, Any]:
    requested = Requested("team-a", "logs", None, None, host_ref)
    return {
        "formRef": REF.to_json(),
        "host": host,
        "space": "team-a",
        "name": "logs",
        "uid": "host-uid-1",
        "generation": "1",
        "revision": "1",
        "requested": {
            "space": requested.space,
            "name": requested.name,
            "pin": None,
            "importId": None,
            "hostRef": requested.host_ref,
        },
    }


def _run(
    body: dict[str, Any],
    tenancy: FakeTenancy,
    *,
    deleting: bool = False,
    bindings: MemoryBindings | None = None,
) -> Any:
    assert deleting == (body["metadata"].get("deletionTimestamp") is not None)
    looked, _ = asyncio.run(look_once(body, tenancy, bindings, REGISTRY))  # type: ignore[arg-type]
    return looked


def _blocked(result: Any) -> str | None:
    return next(
        (str(c.reason) for c in result.outcome.conditions if str(c.type) == "Blocked" and c.status),
        None,
    )


@pytest.mark.parametrize(
    ("body", "grants", "default", "reason"),
    [
        (_body(), (), "prod", "SpaceNotGranted"),
        (_body(), (SpaceGrant("g", "staging", ("team-a",), ("ns-a",)),), "prod", "SpaceNotGranted"),
        (_body(hostRef="nowhere"), GRANTS, "prod", "SpaceNotGranted"),
        (
            _body(hostRef="nowhere"),
            (SpaceGrant("g", "nowhere", ("team-a",), ("ns-a",)),),
            "prod",
            "HostNotFound",
        ),
        (_body(), GRANTS, None, "HostNotFound"),
        (_body(importId="team-a/logs"), (), "prod", "SpaceNotGranted"),
        (_body(status=_claimed_status()), (), "prod", "SpaceNotGranted"),
        # once claimed, the recorded host counts, not today's default
        (_body(status=_claimed_status("staging")), GRANTS[:1], "prod", "SpaceNotGranted"),
    ],
)
def test_without_a_grant_nothing_is_sent_not_even_a_read(
    body: dict[str, Any], grants: tuple[SpaceGrant, ...], default: str | None, reason: str
) -> None:
    tenancy = FakeTenancy(grants, default)
    bindings = MemoryBindings()
    result = _run(body, tenancy, bindings=bindings)
    assert _blocked(result) == reason
    assert tenancy.calls() == []
    assert bindings.writes == [], "no grant, no binding: an ungranted CR can never squat a name"
    assert result.wrote is not None and result.wrote["conditions"]


def test_a_granted_cr_binds_the_resolved_host_before_anything_is_sent() -> None:
    tenancy = FakeTenancy(GRANTS, "prod")
    bindings = MemoryBindings()
    with pytest.raises(AssertionError, match="unexpected host call read"):
        _run(_body(), tenancy, bindings=bindings)
    (binding,) = bindings.objects.values()
    assert binding.identity.host == "prod"
    assert binding.requested is not None and binding.requested.host_ref is None
    assert tenancy.calls() == ["read"], "the first request came after the binding"


def test_an_import_that_names_another_target_is_granted_for_that_target_not_the_recorded_one() -> (
    None
):
    """An import that never found its target may claim afresh when its spec names another one
    (core.plan.reclaims): the grant is checked for the target it is about to bind, never only
    for the one it recorded."""
    recorded = {**_claimed_status(), "uid": None, "generation": None, "revision": None}
    recorded["requested"] = {**recorded["requested"], "importId": "team-a/logs"}
    bindings = MemoryBindings()
    tenancy = FakeTenancy(GRANTS, "prod")
    moved = _body(status=recorded, space="team-b", importId="team-b/logs")
    result = _run(moved, tenancy, bindings=bindings)
    assert _blocked(result) == "SpaceNotGranted"
    assert [b.identity.space for b in bindings.objects.values()] == [], "nothing bound"
    assert tenancy.calls() == []


def test_a_deletion_without_a_grant_stays_blocked_and_deletes_nothing() -> None:
    tenancy = FakeTenancy((), "prod")
    result = _run(_body(status=_claimed_status(), deleting=True), tenancy, deleting=True)
    assert _blocked(result) == "SpaceNotGranted"
    assert not result.outcome.finalized and tenancy.calls() == []
    assert '"deletionPolicy":"Orphan"' in next(
        c.message for c in result.outcome.conditions if str(c.type) == "Blocked"
    )


def test_orphan_and_never_claimed_deletions_need_no_grant_and_send_nothing() -> None:
    tenancy = FakeTenancy((), "prod")
    orphan = _body(status=_claimed_status(), deleting=True, deletionPolicy="Orphan")
    assert _run(orphan, tenancy, deleting=True).outcome.finalized
    assert _run(_body(deleting=True), tenancy, deleting=True).outcome.finalized
    assert tenancy.calls() == []


def test_host_ref_is_an_identity_field() -> None:
    tenancy = FakeTenancy((*GRANTS, SpaceGrant("s", "staging", ("team-a",), ("ns-a",))), "prod")
    body = _body(status=_claimed_status("prod", None), hostRef="staging")
    result = _run(body, tenancy)
    assert _blocked(result) == "IdentityChanged"
    message = next(c.message for c in result.outcome.conditions if str(c.type) == "Blocked")
    assert "spec.hostRef" in message and "'staging'" in message
    assert tenancy.calls() == []


def test_one_owner_per_host_the_same_name_on_two_hosts_is_two_resources() -> None:
    grants = (*GRANTS, SpaceGrant("s", "staging", ("team-a",), ("ns-a",)))
    tenancy = FakeTenancy(grants, "prod")
    bindings = MemoryBindings()
    on_prod = _body()
    on_staging = {**_body(hostRef="staging"), "metadata": {**_body()["metadata"], "uid": "cr-2"}}
    for body in (on_prod, on_staging):
        with pytest.raises(AssertionError, match="unexpected host call read"):
            _run(body, tenancy, bindings=bindings)  # bound, then the first read
    owners = {b.identity.host: b.claim.uid for b in bindings.objects.values() if b.claim}
    assert owners == {"prod": "cr-1", "staging": "cr-2"}  # no hostRef: the default host's


def _selecting(*expressions: Requirement, labels: tuple[tuple[str, str], ...] = ()) -> SpaceGrant:
    return SpaceGrant("g", "prod", ("team-a",), selector=Selector(labels, expressions))


@pytest.mark.parametrize(
    ("grant", "broad"),
    [
        (_selecting(Requirement("team", "NotIn", ("b",))), True),
        (_selecting(Requirement("sandbox", "DoesNotExist")), True),
        (
            _selecting(Requirement("team", "NotIn", ("b",)), Requirement("x", "DoesNotExist")),
            True,
        ),
        (_selecting(labels=(("team", "a"),)), False),
        (_selecting(Requirement("team", "In", ("a",))), False),
        (_selecting(Requirement("team", "Exists")), False),
        (_selecting(Requirement("team", "Exists"), Requirement("team", "NotIn", ("b",))), False),
        (_selecting(), False),  # an empty selector matches nothing here
        (SpaceGrant("g", "prod", ("team-a",), namespaces=("ns-a",)), False),
    ],
)
def test_a_selector_without_a_positive_term_is_flagged(grant: SpaceGrant, broad: bool) -> None:
    """NotIn and DoesNotExist alone match every namespace lacking a label, including those
    anybody creates later: namespaces nobody meant to grant."""
    assert (too_broad(grant) is not None) is broad
    # A namespace nobody named, with no labels at all, is covered exactly when it is flagged.
    assert grant.covers_namespace("created-later", {}) is broad


def test_the_grant_status_says_it_once_and_clears_when_fixed() -> None:
    broad = _selecting(Requirement("team", "NotIn", ("b",)))
    status = grant_status(broad, 3, None, "2026-12-04T10:00:00Z")
    assert status is not None
    (condition,) = status["conditions"]
    assert condition["type"] == "SelectorTooBroad" and condition["status"] == "True"
    assert condition["reason"] == "NoPositiveTerm" and condition["observedGeneration"] == 3
    assert "positive term" in condition["message"]
    assert grant_status(broad, 3, status, "2026-12-04T10:05:00Z") is None, "nothing new to say"
    fixed = _selecting(Requirement("team", "In", ("a",)))
    cleared = grant_status(fixed, 4, status, "2026-12-04T10:06:00Z")
    assert cleared is not None
    assert cleared["conditions"][0]["status"] == "False"
    assert cleared["conditions"][0]["lastTransitionTime"] == "2026-12-04T10:06:00Z"
    assert cleared["observedGeneration"] == 4


# -- a credential is bound to a host *and* its URL --------------------------------------------


def _refusal(written: str | None, host: str = "prod", url: str = "https://p.example/api") -> Any:
    annotations = {} if written is None else {CREDENTIAL_ANNOTATION: written}
    return credential_refusal("ops", "tok", host, url, annotations)


@pytest.mark.parametrize(
    "written",
    [
        "prod=https://p.example/api",
        "prod=https://p.example/api/",  # a trailing / on either side is the same URL
        " staging=https://s.example , prod=https://p.example/api ",
        "prod,prod=https://p.example/api",  # the old entry beside the new one (the upgrade)
    ],
)
def test_a_secret_opted_in_for_the_host_at_its_url_is_used(written: str) -> None:
    assert _refusal(written) is None
    assert _refusal(written, url="https://p.example/api/") is None


@pytest.mark.parametrize(
    ("written", "elsewhere", "says", "value"),
    [
        (None, False, "(it is not opted in)", "prod=https://p.example/api"),
        ("", False, "(it is not opted in)", "prod=https://p.example/api"),
        (
            "staging=https://s.example",
            False,
            "(it is opted in for staging only)",
            "staging=https://s.example,prod=https://p.example/api --overwrite",
        ),
        (
            "prod=https://evil.example, staging=https://s.example",
            True,
            "is a credential of this host at https://evil.example only, not at its URL "
            "https://p.example/api",
            "staging=https://s.example,prod=https://p.example/api --overwrite",
        ),
        (
            "staging,prod",
            True,
            "opts this host in by name only, which binds the credential to no URL",
            "staging,prod=https://p.example/api --overwrite",
        ),
        # Another host's URL never counts for this one, nor the same URL under another name.
        ("default=https://p.example/api", False, "(it is opted in for default only)", None),
        ("prod=http://p.example/api", True, "not at its URL https://p.example/api", None),
    ],
)
def test_any_other_opt_in_is_refused_with_the_exact_annotation_to_write(
    written: str | None, elsewhere: bool, says: str, value: str | None
) -> None:
    refusal = _refusal(written)
    assert refusal is not None and refusal.elsewhere is elsewhere
    assert says in refusal.message
    if value is not None:
        assert refusal.message.endswith(
            f": kubectl -n ops annotate secret tok takoform.io/host-credential-for={value}"
        )
    # The command as printed, run: the Secret is then opted in, for this URL and no other.
    command = refusal.message.rsplit(": kubectl ", 1)[1]
    annotation = shlex.split(command)[5]
    key, _, written_now = annotation.partition("=")
    assert _refusal(written_now) is None
    assert _refusal(written_now, url="https://elsewhere.example") is not None
    assert ("prod", "https://p.example/api") in credential_entries({key: written_now})


def test_a_url_an_opt_in_cannot_name_is_said_so_without_a_command() -> None:
    refusal = _refusal("prod=https://a.example/x,y", url="https://a.example/x,y")
    assert refusal is not None and "cannot name a URL with a comma" in refusal.message
    assert "kubectl" not in refusal.message
