"""One host that every namespace may use for every space: the tenancy of tests about the
reconcile itself rather than about grants. It is what kube.tenancy holds for a cluster with one
TakoformHost `default` and one grant to all namespaces, so the reconcile under test takes exactly
the operator's path (hold, grant, plan, read, decide, act) with nothing left out."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from memory_bindings import MemoryBindings

from takoform_operator.core.outcome import Outcome
from takoform_operator.core.ownership import restored
from takoform_operator.core.registry import Registry
from takoform_operator.core.state import DEFAULT_HOST, Desired, State
from takoform_operator.core.tenancy import Selector, SpaceGrant
from takoform_operator.host_port import HostPort
from takoform_operator.service import reconcile

#: The label every namespace carries here, and the one grant that selects it.
_EVERY_NAMESPACE = ("takoform.test/granted", "true")


class OneHost:
    def __init__(self, port: HostPort, name: str = DEFAULT_HOST) -> None:
        self._port = port
        self._name = name
        self._grant = SpaceGrant(
            name="every-namespace",
            host=name,
            spaces=("*",),
            selector=Selector(match_labels=(_EVERY_NAMESPACE,)),
        )

    def default_host(self) -> str | None:
        return self._name

    def marked_default(self) -> Collection[str]:
        return (self._name,)

    def hosts(self) -> Collection[str]:
        return (self._name,)

    def grants(self) -> Iterable[SpaceGrant]:
        return (self._grant,)

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        return dict([_EVERY_NAMESPACE])

    def namespace_uid(self, namespace: str) -> str:
        return ""

    def port(self, host: str, namespace: str = "") -> HostPort:
        assert host == self._name, f"a request for host {host!r} on a one-host test"
        return self._port


async def reconcile_with_one_host(
    desired: Desired,
    state: State,
    port: HostPort,
    registry: Registry,
    bindings: MemoryBindings | None = None,
) -> Outcome:
    """One reconcile exactly as the operator runs it (service.reconcile), on one host granted to
    every namespace and with no rival CR (a binding store of its own, which the recorded state
    re-binds: a CR claimed before bindings existed takes the same path), unless given one. The
    state is restored from the CR's binding first, as kube.crs.read_cr does (a status write lost
    after the binding)."""
    store = MemoryBindings() if bindings is None else bindings
    state = restored(state, store.held_by(desired.cr_uid))
    return (await reconcile(desired, state, registry, OneHost(port), store)).outcome
