"""Remedy commands a user can paste: the CR named as kubectl names it without ambiguity.

Every remedy names the CR's fully qualified resource (`buckets.storage.takoform.io`, never a
bare `buckets`, which another API group may serve too), its namespace and its own name (not the
host resource's name, which spec.resourceName may make different). Values are shell-quoted.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from takoform_spec.identity import FormLine

from .state import Desired


@dataclass(frozen=True)
class Remedy:
    """One way out of a Blocked (or Degraded) condition, as data: what it does, the command that
    does it (None: a step outside the cluster, such as one on the host), and the object that
    command acts on. The status carries the list (status.remedies) so tools print and run the
    commands without parsing the condition message, which states them too (remedies_text)."""

    does: str
    command: str | None = None
    acts_on: str | None = None

    def text(self) -> str:
        return f"{self.does}: {self.command}" if self.command else self.does

    def to_json(self) -> dict[str, str]:
        """The item of status.remedies."""
        doc = {"does": self.does}
        if self.command:
            doc["command"] = self.command
        if self.acts_on:
            doc["actsOn"] = self.acts_on
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Remedy:
        command, acts_on = doc.get("command"), doc.get("actsOn")
        return cls(
            str(doc.get("does") or ""),
            str(command) if command else None,
            str(acts_on) if acts_on else None,
        )


def remedies_line(remedies: Sequence[Remedy]) -> str:
    """The remedies as one line: `...`, or `(1) ... ; (2) ...`. A space stands before each `;`,
    so a command can be copied without it."""
    if len(remedies) == 1:
        return remedies[0].text()
    return " ; ".join(f"({n}) {remedy.text()}" for n, remedy in enumerate(remedies, 1))


def remedies_text(remedies: Sequence[Remedy]) -> str:
    """How a condition message states its remedies: `Remedy: ...` or `Remedies: (1) ...`."""
    if not remedies:
        return ""
    return f"{'Remedy' if len(remedies) == 1 else 'Remedies'}: {remedies_line(remedies)}"


def kubectl_name(line: FormLine, name: str, namespace: str) -> str:
    """`<plural>.<group>/<name> -n <namespace>`: a CR of `line`, as kubectl arguments."""
    where = f" -n {shlex.quote(namespace)}" if namespace else ""
    return f"{line.plural}.{line.group}/{shlex.quote(name)}{where}"


def kubectl_object(desired: Desired) -> str:
    """The CR `desired` was read from, as kubectl arguments (kubectl_name)."""
    return kubectl_name(desired.line, desired.cr_name or desired.name, desired.namespace)


def patch_command(obj: str, spec: dict[str, object]) -> str:
    """`kubectl patch` of the CR `obj` (from kubectl_object) merging `spec` into its spec."""
    body = json.dumps({"spec": spec}, separators=(",", ":"))
    return f"kubectl patch {obj} --type=merge -p {shlex.quote(body)}"


def orphan_command(obj: str) -> str:
    """Sets deletionPolicy Orphan: the CR can go without anything sent to the host."""
    return patch_command(obj, {"deletionPolicy": "Orphan"})


def release_command(obj: str) -> str:
    """The CR `obj` released without a host call: Orphan, then deleted."""
    return f"{orphan_command(obj)} && kubectl delete {obj}"


def edit_status_command(obj: str) -> str:
    """Opens the status of the CR `obj` (its status subresource) in an editor."""
    return f"kubectl edit {obj} --subresource=status"


def unreadable_status_remedies(obj: str, *, deleting: bool) -> tuple[Remedy, ...]:
    """The ways out of a status that does not hold a readable state (Blocked StateUnreadable).
    It may record a resource, so it is never guessed from: restored, or this CR let go without
    a host call (the resource stays; a new CR imports it, spec.importId)."""
    restore = Remedy(
        "restore the status the operator wrote (the backup the CR came from has it)",
        edit_status_command(obj),
        obj,
    )
    if deleting:
        let_go = Remedy(
            "or let this CR go without a host call (the host resource stays)",
            orphan_command(obj),
            obj,
        )
    else:
        let_go = Remedy(
            "or let this CR go without a host call, then import the host resource with a new CR "
            "(spec.importId)",
            release_command(obj),
            obj,
        )
    return (restore, let_go)
