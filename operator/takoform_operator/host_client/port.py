"""The host as the reconcile service needs it (HostPort), over the HTTP client.

The only place host answers meet core values: operation and resource views, actions sent.
"""

from __future__ import annotations

from takoform_operator.core.actions import Action, Create, Delete, Target, Update, same_target
from takoform_operator.core.state import OperationView, OpState, ResourceView
from takoform_operator.host_client.client import HostClient
from takoform_operator.host_port import HostProtocolError, OperationNotFound, ResourceNotFound


class HostClientPort:
    """HostPort over the HTTP client; the only place host answers meet core values."""

    def __init__(self, client: HostClient) -> None:
        self._client = client

    async def get_operation(self, operation_id: str) -> OperationView:
        try:
            return (await self._client.get_operation(operation_id)).view()
        except OperationNotFound:
            return OperationView(OpState.NOT_FOUND)

    async def read(self, target: Target) -> ResourceView | None:
        try:
            resource = await self._client.get_resource(target.space, target.form_ref, target.name)
        except ResourceNotFound:
            return None
        return resource.view()

    async def list_operations(self, target: Target) -> list[tuple[str, OperationView]]:
        found = await self._client.list_operations(target.space, target.form_ref, target.name)
        return [(op.id, op.view()) for op in found]

    async def execute(self, action: Action) -> tuple[str, OperationView]:
        t = action.target
        if isinstance(action, Create):
            op = await self._client.create(t.space, t.form_ref, t.name, action.spec, action.key)
        elif isinstance(action, Update):
            op = await self._client.update(
                t.space,
                t.form_ref,
                t.name,
                action.spec,
                expected_generation=action.expected_generation,
                expected_uid=action.expected_uid,
                key=action.key,
            )
        else:
            assert isinstance(action, Delete)
            op = await self._client.delete(
                t.space, t.form_ref, t.name, expected_uid=action.expected_uid, key=action.key
            )
        view = op.view()
        if not same_target(view, action.verb, t):
            # The answer to our mutation must name it: one naming another resource (or a FormRef
            # that is not the one sent) is not recorded; the same key replays it later.
            raise HostProtocolError(
                f"the host answered the {action.verb} of {t.name} in space {t.space} under "
                f"{t.form_ref} with operation {op.id} for {view.verb} of {view.name} in space "
                f"{view.space} under {view.form_ref}"
            )
        return op.id, view
