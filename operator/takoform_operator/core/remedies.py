"""Remedy commands a user can paste: the CR named as kubectl names it without ambiguity.

Every remedy names the CR's fully qualified resource (`buckets.storage.takoform.io`, never a
bare `buckets`, which another API group may serve too), its namespace and its own name (not the
host resource's name, which spec.resourceName may make different). Values are shell-quoted.
"""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING

from takoform_spec.identity import FormLine

if TYPE_CHECKING:  # core.state imports core.tenancy, which uses the commands below
    from .state import Desired


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
