"""Who may bind a host resource: the rules of the TakoformBinding (brief section 9), in one place.

Each reconcile that got past the grant check asks `claim` what the binding of its identity
allows, and the service carries out the answer against the API server (binding_port):

    binding of the identity                       this CR                       verdict
    --------------------------------------------  ----------------------------  ----------------
    none                                          any (a deletion: to lock it)  Bind (create)
    Bound to this CR                              -                             Ours
    claimRef without uid (an admin's pre-binding) the CR it names               Bind (take it)
                                                  any other                     Blocked
    Bound without claimRef (made by hand)         any                           Blocked: no owner
                                                                                to prove gone;
                                                                                an admin fixes it
    Bound to another CR                           -                             Contested: that
                                                                                CR proven gone
                                                                                makes it Lost
    Released                                      an import of the last         Bind (take it)
                                                  owner's namespace
                                                  any other                     Blocked
    Lost                                          the last owner's namespace    Bind (take it,
                                                  and name (a restore)          with an Event)
                                                  any other                     Blocked

"The last owner's namespace" is that namespace incarnation where the binding recorded its uid:
a namespace deleted and created again under the same name inherits nothing. A CR that takes a
binding over starts from what the binding recorded: the exact FormRef and the host uid it was
bound to, so the uid rule (0011, 0017 rule 6) holds across owners. A CR that
is not the owner sends nothing; being deleted, it is let go without a host call. Docs:
docs/tenancy.md "Bindings". Pure: no kopf, no I/O.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace

from .actions import Target
from .binding import Binding, ClaimRef, Identity, Phase
from .conditions import Reason
from .keys import creator_of, proves_ours
from .outcome import Event, Outcome, blocked, finalized
from .policy import releases_without_host_call
from .remedies import Remedy, kubectl_object
from .state import Desired, ManagementPolicy, Requested, ResourceView, State


@dataclass(frozen=True)
class Ours:
    """The binding is this CR's: go on with `state` (restored from the binding if the status
    lost it)."""

    binding: Binding
    state: State


@dataclass(frozen=True)
class Bind:
    """Write `binding` (create when it has no resourceVersion, else replace it on that
    condition); when the write lands, go on as owner with `state`."""

    binding: Binding
    state: State
    event: Event | None = None


@dataclass(frozen=True)
class Contested:
    """Bound to another CR, `owner`: Blocked by `outcome`, unless that CR is proven gone, in
    which case the binding is Lost (`binding.lost`) and the rules are asked again."""

    binding: Binding
    owner: ClaimRef
    outcome: Outcome
    #: This CR too recorded the target in its own status, before bindings existed (the label
    #: shards of an earlier release could both do so): the host resource decides between the
    #: two claims (`by_evidence`), never their age.
    recorded: bool = False


Verdict = Ours | Bind | Contested | Outcome


def me(desired: Desired) -> ClaimRef:
    return ClaimRef(desired.namespace, desired.cr_name, desired.cr_uid, desired.namespace_uid)


def restored(state: State, held: Binding | None) -> State:
    """The state, with the target of the binding this CR holds when the status lost it (the
    binding is written before anything is sent; the status records the target afterwards)."""
    if state.claimed or held is None or held.form_ref is None:
        return state
    identity = held.identity
    return state.with_target(
        identity.host, held.form_ref, identity.space, identity.name, held.requested
    )


def claim(desired: Desired, state: State, target: Target, binding: Binding | None) -> Verdict:
    """What the binding of `target` (None: there is none) lets this CR do; see the table."""
    mine = me(desired)
    identity = Identity(target.space, target.form_ref.line, target.name, _host(desired, state))
    if binding is None:
        created = _new_binding(identity, mine, target, desired, state)
        return Bind(created, claimed(state, target, desired))
    if binding.owned_by(mine.uid):
        if binding.uid is None and state.uid is not None and _imports(state):
            # No creation key of ours proves an imported incarnation: the binding records its
            # uid once the import bound it (one write, once), so that whoever binds next (a
            # restore, a hand-off) is held to that incarnation, never to what it finds then.
            return Bind(replace(binding, uid=state.uid), restored(state, binding))
        return Ours(binding, restored(state, binding))
    if desired.deleting:
        # Not ours to delete: the owner keeps it.
        message = f"released without a host call: {binding.name} binds it to another CR"
        return finalized(state, message)
    if binding.claim is not None and not binding.claim.uid:
        if binding.claim.names(mine.namespace, mine.name, mine.uid):
            return _take_over(binding, mine, target, desired, state)
        return _blocked(desired, state, binding, "reserved by an admin for another CR")
    if binding.phase is Phase.BOUND:
        if binding.claim is None:
            # Made by hand: no CR to prove gone, and binding it to whoever asks would hand a
            # resource over on a guess. An admin reserves it (release --to) or deletes it.
            return _blocked(desired, state, binding, "bound without claimRef, to no CR")
        outcome = _blocked(desired, state, binding, "bound to another CR")
        return Contested(binding, binding.claim, outcome, recorded=state.claimed)
    last = binding.last_owner
    if binding.phase is Phase.RELEASED:
        if desired.import_id is not None and last is not None and last.same_namespace(mine):
            return _take_over(binding, mine, target, desired, state)
        return _blocked(desired, state, binding, "released by its last owner")
    if last is not None and last.same_namespace(mine) and last.name == mine.name:
        taken = _take_over(binding, mine, target, desired, state)
        message = (
            f"re-bound {binding.name}, Lost by an earlier CR of the same name (uid "
            f"{last.uid or 'unknown'}); the host uid it was bound to is still checked"
        )
        return replace(taken, event=Event("Normal", Reason.REBOUND, message))
    return _blocked(desired, state, binding, "lost by its last owner")


def restores(binding: Binding, desired: Desired) -> str:
    """The uid of the CR this one restores, or "": the last owner the binding remembers, of the
    same namespace (incarnation) and name, that went Lost before the binding recorded the
    incarnation it was bound to (its owner vanished while no operator ran). Its creation key
    then names that CR, and it proves the resource this CR's as well: the same manifest applied
    again re-binds the same incarnation instead of finding its name taken."""
    last = binding.last_owner
    if binding.uid or last is None or not last.uid or last.uid == desired.cr_uid:
        return ""
    return last.uid if last.same_namespace(me(desired)) and last.name == desired.cr_name else ""


def creator_to_weigh(desired: Desired, resource: ResourceView | None) -> str | None:
    """The uid of another CR whose create made `resource` (its creation key says so), or None.
    An import that would bind a resource nobody has bound weighs it first: that CR, alive,
    still holds the resource though its binding went (an admin's forced release, the binding
    CRD reinstalled, a restore without cluster-scoped objects) and binds it again."""
    creator = creator_of(resource) if resource is not None else None
    return None if creator in (desired.cr_uid, desired.restores) else creator


def waits_for_its_owner(desired: Desired, state: State, identity: Identity) -> Outcome:
    """A CR about to bind a resource without a binding that another live CR records (its
    status, or the creation key naming it): never won by a race, it waits (AlreadyManaged)."""
    obj = kubectl_object(desired)
    message = (
        f"{identity} has no TakoformBinding, but another CR records it (in its status, or as "
        "the creator of the host resource) and binds it again; this CR sends nothing "
        "while that CR exists."
    )
    remedies = (
        Remedy("delete this CR", f"kubectl delete {obj}", obj),
        Remedy(
            "or ask a cluster admin to have that CR release it (deletionPolicy Orphan), then "
            "import it from that CR's namespace"
        ),
    )
    outcome = blocked(state, Reason.ALREADY_MANAGED, message, remedies)
    return replace(outcome, contends_for=identity.binding_name())


def _imports(state: State) -> bool:
    return state.requested is not None and state.requested.import_id is not None


def by_evidence(
    desired: Desired, state: State, binding: Binding, resource: ResourceView | None
) -> Bind | None:
    """Two recorded claims of one target (Contested.recorded): this CR takes the binding over
    when the host resource is its own, created with this CR's idempotency key, or the
    incarnation its status is bound to while the binding records another. None: no such
    evidence, the binding stays where it is."""
    if resource is None:
        return None
    bound_here = state.uid is not None and resource.uid == state.uid != binding.uid
    if not (proves_ours(resource, desired) or bound_here):
        return None
    mine = me(desired)
    taken = replace(
        binding,
        claim=mine,
        form_ref=state.form_ref,
        requested=state.requested,
        uid=resource.uid,
    )
    message = (
        f"took {binding.name} over: the host resource (uid {resource.uid}) is this CR's by "
        "its creation key or its recorded uid"
    )
    return Bind(taken, state, Event("Normal", Reason.REBOUND, message))


def let_go(desired: Desired, state: State, binding: Binding) -> Binding | None:
    """The binding after its owner's deletion finished: Released, remembering the owner and
    the uid, when the host resource stays (Orphan, Observe); None (deleted) when it went, or
    when there is nothing to remember: an import or an Observe CR never creates, so one that
    never bound an incarnation holds nothing, and a Released binding without a uid would keep
    the name from every other namespace for good."""
    if not releases_without_host_call(desired):
        return None
    uid = state.uid or binding.uid
    # What it was bound as, not what its spec says now: an importId set while it is deleted
    # does not make a create that may have created into an import.
    requested = state.requested or binding.requested
    imported = (requested.import_id if requested is not None else desired.import_id) is not None
    never_creates = imported or desired.management is ManagementPolicy.OBSERVE
    if uid is None and never_creates:
        return None
    return binding.released(me(desired), uid)


def rebuilt(desired: Desired, state: State, host: str) -> Binding | None:
    """The binding a CR holds, rebuilt from what its status records (target and uid): what
    its deletion lets go when the binding itself went (an admin's forced release, the binding
    CRD reinstalled), so that a release still remembers its owner and its namespace. None: the
    status records no target."""
    if not state.claimed or state.form_ref is None or not state.space or not state.name:
        return None
    identity = Identity(state.space, state.form_ref.line, state.name, host)
    return Binding(
        identity,
        Phase.BOUND,
        me(desired),
        form_ref=state.form_ref,
        requested=state.requested,
        uid=state.uid,
    )


def _host(desired: Desired, state: State) -> str:
    return (state.host or desired.host) if state.claimed else desired.host


def claimed(state: State, target: Target, desired: Desired) -> State:
    """The state with `target` recorded, as the binding records it (unchanged once claimed)."""
    if state.claimed:
        return state
    requested = Requested.of(desired)
    return state.with_target(desired.host, target.form_ref, target.space, target.name, requested)


def _new_binding(
    identity: Identity, mine: ClaimRef, target: Target, desired: Desired, state: State
) -> Binding:
    recorded = claimed(state, target, desired)
    return Binding(
        identity=identity,
        phase=Phase.BOUND,
        claim=mine,
        form_ref=recorded.form_ref,
        requested=recorded.requested,
        uid=state.uid,
    )


def _take_over(
    binding: Binding, mine: ClaimRef, target: Target, desired: Desired, state: State
) -> Bind:
    """Bind a binding someone else held: the exact FormRef and the host uid it recorded come
    with it (an import's own id names the FormRef it reads under)."""
    form_ref = target.form_ref if desired.import_id is not None else binding.form_ref
    taken_target = replace(target, form_ref=form_ref or target.form_ref)
    taken = replace(claimed(State(attempt=state.attempt), taken_target, desired), uid=binding.uid)
    written = replace(
        binding,
        phase=Phase.BOUND,
        claim=mine,
        form_ref=taken.form_ref,
        requested=taken.requested,
    )
    return Bind(written, taken)


def _blocked(desired: Desired, state: State, binding: Binding, why: str) -> Outcome:
    """AlreadyManaged: names the binding an admin can inspect, never another namespace's CR.
    A pre-binding to this CR is offered as a remedy only for a binding of this namespace."""
    obj = kubectl_object(desired)
    message = (
        f"{binding.identity} is {why} (TakoformBinding {binding.name}, phase {binding.phase}); "
        "this CR sends nothing while it is."
    )
    remedies = [Remedy("delete this CR", f"kubectl delete {obj}", obj)]
    if binding.phase is Phase.RELEASED and desired.import_id is None:
        remedies.append(Remedy("or import it from the last owner's namespace (spec.importId)"))
    where = f"takoformbindings/{binding.name}"
    if binding.phase is Phase.BOUND and binding.claim is not None and binding.claim.uid:
        remedies.append(
            Remedy(
                "or ask a cluster admin to have its owner release it (deletionPolicy Orphan)",
                f"kubectl get {where} -o yaml",
                where,
            )
        )
    elif binding.hands_across(me(desired)):
        # Another namespace's (or nobody's): handing it here is a cross-namespace hand-off,
        # which an admin weighs; no ready-made command makes it look routine.
        remedies.append(
            Remedy(
                "or, as it is not this namespace's, a cluster admin decides whether it may "
                "pass to this namespace",
                f"kubectl get {where} -o yaml",
                where,
            )
        )
    else:
        to = f"{desired.namespace}/{desired.cr_name}"
        remedies.append(
            Remedy(
                "or ask a cluster admin to pre-bind it to this CR",
                f"kubectl takoform release {binding.name} --to {shlex.quote(to)}",
                where,
            )
        )
    outcome = blocked(state, Reason.ALREADY_MANAGED, message, tuple(remedies))
    return replace(outcome, contends_for=binding.name)
