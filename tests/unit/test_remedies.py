"""Remedies a user can paste (core.remedies): data on the outcome (status.remedies), each command
naming the CR's fully qualified resource, its namespace and its own name (not the host
resource's), parsing as a shell command, and stated in the condition message too."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import replace

import pytest
from builders import BUCKET_REF, REGISTRY, SPEC, desired, served

from takoform_operator.core.actions import Create, Target
from takoform_operator.core.binding import Binding, ClaimRef, Identity, Phase
from takoform_operator.core.conditions import ConditionType, Reason
from takoform_operator.core.decide import Decision, Observation, decide
from takoform_operator.core.host_answer import Rejection, rejected
from takoform_operator.core.outcome import NextLook, Outcome, refused
from takoform_operator.core.ownership import Contested, claim
from takoform_operator.core.plan import Plan, plan
from takoform_operator.core.remedies import (
    Remedy,
    kubectl_object,
    orphan_command,
    remedies_text,
)
from takoform_operator.core.state import Requested, ResourceView, State
from takoform_operator.core.tenancy import access, remedy
from takoform_spec.host_api import ErrorCode

REF = BUCKET_REF
#: The CR `archive` in namespace `apps` manages the host resource `logs` (spec.resourceName).
DESIRED = desired(namespace="apps", cr_name="archive", created="2026-11-30T08:00:01Z")
CR = ["buckets.storage.takoform.io/archive", "-n", "apps"]
ORPHAN = ["--type=merge", "-p", '{"spec":{"deletionPolicy":"Orphan"}}']
CLAIMED = State(form_ref=REF, space="team-a", name="logs", requested=Requested.of(DESIRED))


def _commands(remedies: Sequence[Remedy]) -> list[list[str]]:
    """Every command of the remedies, split as a shell would (`a && b` is two commands)."""
    return [
        shlex.split(part)
        for remedy in remedies
        if remedy.command
        for part in remedy.command.split(" && ")
    ]


def _remedies(outcome: Outcome) -> tuple[Remedy, ...]:
    """The outcome's remedies, after checking its Blocked message states each of them."""
    message = _blocked_message(outcome)
    assert outcome.remedies and message.endswith(remedies_text(outcome.remedies))
    return outcome.remedies


def _resource(uid: str, creation_key: str | None = None) -> ResourceView:
    return served(uid=uid, creation_key=creation_key)


def _blocked_message(outcome: Outcome) -> str:
    return next(c.message for c in outcome.conditions if c.type is ConditionType.BLOCKED)


def test_the_cr_is_named_fully_qualified_with_namespace_and_its_own_name() -> None:
    assert kubectl_object(DESIRED) == "buckets.storage.takoform.io/archive -n apps"
    odd = replace(DESIRED, namespace="a b", cr_name="x")
    assert shlex.split(kubectl_object(odd)) == ["buckets.storage.takoform.io/x", "-n", "a b"]


def test_the_uid_mismatch_remedy_annotates_this_cr_with_the_current_uid() -> None:
    state = replace(CLAIMED, uid="h-old", generation="1")
    planned = plan(DESIRED, state, REGISTRY)
    assert isinstance(planned, Plan)
    outcome = decide(DESIRED, state, planned, Observation(None, _resource("h-new")), REGISTRY)
    assert outcome.outcome.asserted()[ConditionType.BLOCKED] is Reason.UID_MISMATCH
    (command,) = _commands(_remedies(outcome.outcome))
    assert command == [
        "kubectl",
        "annotate",
        *CR,
        "takoform.io/accept-uid=h-new",
        "--overwrite",
    ]


def test_a_resource_that_is_not_ours_names_this_cr_and_the_import_id() -> None:
    planned = plan(DESIRED, CLAIMED, REGISTRY)
    assert isinstance(planned, Plan)
    foreign = _resource("h-9", creation_key="someone:create:0")
    outcome = decide(DESIRED, CLAIMED, planned, Observation(None, foreign), REGISTRY).outcome
    remedies = _remedies(outcome)
    assert _commands(remedies) == [["kubectl", "delete", *CR]] * 2
    assert remedies[0].acts_on == kubectl_object(DESIRED)
    import_id = shlex.split(remedies[0].does.split("spec.importId set to ")[1])[0]
    assert json.loads(import_id)["name"] == "logs"


def test_another_name_is_a_new_cr_since_the_name_of_this_one_is_fixed() -> None:
    # metadata.name never changes, spec.resourceName not once anything was sent: the remedy
    # that offers another name deletes this CR first.
    planned = plan(DESIRED, CLAIMED, REGISTRY)
    assert isinstance(planned, Plan)
    foreign = _resource("h-9", creation_key="someone:create:0")
    outcome = decide(DESIRED, CLAIMED, planned, Observation(None, foreign), REGISTRY).outcome
    other_name = _remedies(outcome)[1]
    assert "another name" in other_name.does and "delete this CR" in other_name.does
    assert other_name.command == f"kubectl delete {kubectl_object(DESIRED)}"
    assert other_name.acts_on == kubectl_object(DESIRED)


def test_a_refused_create_names_this_cr() -> None:
    target = Target("team-a", REF, "logs")
    decision = Decision(
        Outcome(CLAIMED, (), NextLook.PENDING), Create(target, SPEC, "cr-1:create:0")
    )
    outcome = rejected(decision, Rejection(ErrorCode.RESOURCE_EXISTS, "exists"), DESIRED)
    assert _commands(_remedies(outcome)) == [["kubectl", "delete", *CR]] * 2


def test_already_managed_names_this_cr_and_the_binding_never_the_owner() -> None:
    identity = Identity("team-a", REF.line, "logs", "default")
    owned = Binding(identity, Phase.BOUND, ClaimRef("ops", "first", "cr-0"), REF)
    verdict = claim(DESIRED, State(), Target("team-a", REF, "logs"), owned)
    assert isinstance(verdict, Contested)
    binding = f"takoformbindings/{identity.binding_name()}"
    assert _commands(_remedies(verdict.outcome)) == [
        ["kubectl", "delete", *CR],
        ["kubectl", "get", binding, "-o", "yaml"],
    ]
    assert "ops" not in str(verdict.outcome), "another namespace's CR is never named"
    # Released by another namespace: an admin decides; the remedy only reads the binding.
    released = replace(owned, phase=Phase.RELEASED, claim=None, last_owner=owned.claim)
    outcome = claim(DESIRED, State(), Target("team-a", REF, "logs"), released)
    assert isinstance(outcome, Outcome)
    assert _commands(_remedies(outcome))[-1] == ["kubectl", "get", binding, "-o", "yaml"]
    # Released by this namespace: the pre-binding to ask an admin for.
    ours = replace(released, last_owner=ClaimRef(DESIRED.namespace, "first", "cr-0"))
    outcome = claim(DESIRED, State(), Target("team-a", REF, "logs"), ours)
    assert isinstance(outcome, Outcome)
    to = f"{DESIRED.namespace}/{DESIRED.cr_name}"
    assert _commands(_remedies(outcome))[-1] == [
        "kubectl", "takoform", "release", identity.binding_name(), "--to", to,
    ]  # fmt: skip


def test_an_identity_change_names_this_cr() -> None:
    outcome = plan(replace(DESIRED, space="team-b"), CLAIMED, REGISTRY)
    assert isinstance(outcome, Outcome)
    orphan = ["kubectl", "patch", *CR, *ORPHAN]
    assert _commands(_remedies(outcome)) == [orphan, ["kubectl", "delete", *CR]]


def test_the_grant_remedy_is_a_command_that_creates_the_grant() -> None:
    command = remedy("apps", "Team A's", "prod")
    words = shlex.split(command)
    # create, never apply: a pasted remedy must not overwrite a grant that exists.
    assert words[0] == "echo" and words[2:] == ["|", "kubectl", "create", "-f", "-"]
    grant = json.loads(words[1])
    assert grant["kind"] == "TakoformSpaceGrant"
    assert grant["spec"] == {
        "hostRef": "prod",
        "spaces": ["Team A's"],
        "namespaces": {"names": ["apps"]},
    }
    assert grant["metadata"]["name"].startswith("apps-team-a-s-")


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (("a-b", "c", "prod"), ("a", "b-c", "prod")),  # the same readable name
        (("apps", "team-a", "prod"), ("apps", "team-a", "staging")),  # another host
        (("apps", "Team A", "prod"), ("apps", "team-a", "prod")),  # spaces are case-sensitive
    ],
)
def test_two_different_grant_remedies_never_name_the_same_grant(
    one: tuple[str, str, str], other: tuple[str, str, str]
) -> None:
    def name(args: tuple[str, str, str]) -> str:
        doc = json.loads(shlex.split(remedy(*args))[1])
        assert len(doc["metadata"]["name"]) <= 63
        return str(doc["metadata"]["name"])

    assert name(one) != name(other)


def test_the_tenancy_remedy_names_this_cr_for_an_orphaning_deletion() -> None:
    denied = access(
        namespace="apps",
        namespace_labels={},
        host="prod",
        host_ref=None,
        space="team-z",
        hosts=("prod",),
        grants=(),
        obj=kubectl_object(DESIRED),
    )
    assert denied is not None
    grant, orphan = denied.remedies
    assert grant.command == remedy("apps", "team-z", "prod")
    assert orphan.command == orphan_command(kubectl_object(DESIRED))
    assert orphan.acts_on == kubectl_object(DESIRED)
    outcome = refused(DESIRED, State(), denied.reason, denied.message, denied.remedies)
    assert _remedies(outcome) == denied.remedies
