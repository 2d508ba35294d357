"""The plugin's commands (`import`, `blocked`, `trace`, `bindings`, `release`) and their command
line, shared by `kubectl takoform` and `takoform-operator`. Errors end as one line on stderr: exit
status 1 for what the cluster or the host answered, 2 for a command line that cannot be right."""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TextIO

import yaml
from pydantic import ValidationError

from takoform_operator.core.binding import (
    BINDING_KIND,
    BINDING_PLURAL,
    Binding,
    ClaimRef,
    InvalidBinding,
    binding_from_json,
)
from takoform_operator.core.errors import CodecError, InvalidImportId
from takoform_operator.core.import_id import parse_import_id
from takoform_operator.core.registry import Registry
from takoform_operator.core.state import DEFAULT_HOST
from takoform_operator.core.tenancy import GROUP
from takoform_operator.host_client.pool import HostPool
from takoform_operator.host_port import (
    HostError,
    OperationNotFound,
    ResourceNotFound,
)
from takoform_operator.plugin.cluster import Cluster, Conflict, Forbidden, PluginError
from takoform_operator.plugin.host_reach import add_host_url
from takoform_operator.plugin.hosts import (
    DEFAULT_OPERATOR_NAMESPACE,
    chosen_host,
    host_pool,
    host_problem,
    warn,
)
from takoform_operator.plugin.render import (
    OUTPUTS,
    Lookup,
    Trace,
    UsageError,
    blocked_document,
    blocked_report,
    blocked_rows,
    check_object_name,
    import_manifest,
    printable,
    resolve_kind,
    resource_of,
    split_kind_name,
    trace_document,
    trace_report,
)
from takoform_operator.plugin.render_bindings import (
    UNKNOWN_UID,
    binding_name_arg,
    binding_rows,
    bindings_document,
    bindings_report,
    claim_arg,
    forced_document,
    forced_warning,
    hand_off,
    release_refusal,
    reserved_document,
    reserved_message,
    unbound_message,
    unprotected_document,
)
from takoform_operator.registry_data import load_registry
from takoform_operator.settings import Settings
from takoform_spec.identity import FormLine, FormRef

#: Help is formatted at a fixed width so that the text in docs/operator.md is the real one.
HELP_WIDTH = 100
Formatter = functools.partial(argparse.RawDescriptionHelpFormatter, width=HELP_WIDTH)

DESCRIPTION = """\
Day-2 commands for Takoform resources: import an existing host resource as a CR, list the
Blocked CRs with their remedies, trace one CR down to its host resource, list the
TakoformBindings (which CR owns which host resource) and release one (cluster admins).

The cluster is read with your kubeconfig (--kubeconfig, KUBECONFIG, ~/.kube/config). The host
is reached with the credentials of the host configuration: the TakoformHost named by --host
(else the one marked default) and its token, CA bundle and client certificate Secrets in the
operator's namespace; the single-host settings TAKOFORM_HOST_URL and TAKOFORM_HOST_TOKEN /
TAKOFORM_HOST_TOKEN_FILE are the implicit host named `default`, as for the operator; without
them, the one its credential Secret names. --host-url dials the host through a port-forward.
Only `release` writes: one TakoformBinding, never a CR or the host.

Exit status: 0 done, 1 the cluster or the host failed or refused, 2 invalid command line."""

IMPORT_DESCRIPTION = """\
Read the host resource an import id names, under its exact FormRef, and print a CR manifest
that imports it: spec.parameters are the host's spec decoded for the CR, so the first reconcile
sends no update. Apply it as is: kubectl takoform import ID | kubectl apply -f -

The CR is safe by default: managementPolicy Observe (the operator reads the resource and
reports drift, never mutates it) and deletionPolicy Orphan (deleting the CR leaves the resource
on the host). Once its spec looks right, take it over with --full (or patch
spec.managementPolicy to Full); --deletion-policy Delete makes deleting the CR delete it.

ID is the canonical JSON import id, e.g.
  '{"space":"team-a","apiVersion":"storage.takoform.io/v1","kind":"Bucket",
    "definitionVersion":"1.1.0","schemaDigest":"sha256:...","name":"logs"}'
(as a Blocked NameTaken message or a CR's status prints it); NAME and SPACE/NAME name the
line's default create ref and need --kind."""

BLOCKED_DESCRIPTION = """\
List the CRs of every Takoform kind whose Blocked condition is True, with the reason and the
remedies the operator recorded in the status (status.remedies)."""

TRACE_DESCRIPTION = """\
Follow one CR down the chain: the CR and its conditions -> the FormRef, host, space, name and
uid recorded in its status -> the host resource read under that exact FormRef (uid, generation,
observedGeneration, conditions) -> the pending host operation, read from the host's operations
API -> the CR's last Events."""


BINDINGS_DESCRIPTION = """\
List the TakoformBindings: for each host resource (host, space, kind, name), the CR that owns
it (OWNER, NAMESPACE/NAME; "(reserved)": a claimRef without uid, an admin's pre-binding that only
the CR of that namespace and name may bind) and the CR that owned it last (LAST OWNER). An object
the operator cannot read is listed as Invalid: it binds nothing to anyone. TakoformBindings are
cluster-scoped: every one is listed, with or without -A. Listing them takes the right to list
takoformbindings.operator.takoform.io (the chart's takoform-admin)."""

RELEASE_DESCRIPTION = """\
For cluster admins: let a host resource go whose owner is gone (phase Released or Lost), or
change an admin's pre-binding (a claimRef without uid, also while Bound).

  --to NAMESPACE/NAME  reserve it: spec.claimRef becomes that CR, without uid, and nothing else
                       changes; only the CR of that namespace and name may bind it next. A
                       CR of another namespace than the binding's (its owner's, else its last
                       owner's, else the one it is reserved for; a namespace deleted and
                       created again is another) is a hand-off across namespaces: asked on
                       the terminal, refused without one unless --yes
  without --to         delete the TakoformBinding: the host resource is unbound, and any
                       namespace granted its space on its host may import it

A binding Bound to a CR (a claimRef with a uid) is refused, and so is any other change of it
(an admission policy shipped with the CRDs protects it): delete that CR with deletionPolicy
Orphan first, and the operator releases it.

  --force              override that protection: the binding is marked forced
                       (annotation takoform.io/force-release), then deleted or reserved. The
                       CR it was Bound to still acts on the host resource and binds it again
                       at its next look, unless another CR binds it first: two CRs may then
                       act on one resource. For an owner that is gone while no operator runs.

Each write is conditioned on the resourceVersion read: if the binding changed meanwhile,
nothing more is written and the command says so; run it again. BINDING is the name
`kubectl takoform bindings` lists (tb-...)."""


def dumped(document: Any, output: str) -> str:
    """`document` as JSON or YAML, every non-ASCII and control character escaped, so a tenant's
    string reaches a terminal as text here too."""
    if output == "json":
        return json.dumps(document, indent=2, ensure_ascii=True)
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=False, width=100).rstrip("\n")


def _output(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o",
        "--output",
        choices=OUTPUTS,
        default="table",
        help="table (default), or the same as one JSON or YAML document",
    )


def _common(parser: argparse.ArgumentParser, *, host: bool = True) -> None:
    group = parser.add_argument_group("cluster and host" if host else "cluster")
    group.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG, ~/.kube/config)")
    group.add_argument("--context", help="kubeconfig context (default: the current one)")
    if not host:
        return
    group.add_argument(
        "--operator-namespace",
        help="namespace of the TakoformHosts' token Secrets (default: "
        f"TAKOFORM_OPERATOR_NAMESPACE, else {DEFAULT_OPERATOR_NAMESPACE})",
    )
    add_host_url(group)


def add_commands(commands: Any) -> None:
    """Register import, blocked, trace, bindings and release on an argparse sub-parsers object."""
    imports = commands.add_parser(
        "import",
        help="print a CR manifest that imports an existing host resource",
        description=IMPORT_DESCRIPTION,
        formatter_class=Formatter,
    )
    imports.add_argument("id", metavar="ID", help="the import id (canonical JSON)")
    imports.add_argument("-n", "--namespace", help="metadata.namespace of the CR (default: none)")
    imports.add_argument(
        "--name", help="metadata.name of the CR (default: the host resource's name)"
    )
    management = imports.add_mutually_exclusive_group()
    management.add_argument(
        "--observe",
        dest="management",
        action="store_const",
        const="Observe",
        default="Observe",
        help="spec.managementPolicy: Observe, read only: never mutates the host (the default)",
    )
    management.add_argument(
        "--full",
        dest="management",
        action="store_const",
        const="Full",
        help="spec.managementPolicy: Full: the operator keeps the host resource to the CR's spec",
    )
    imports.add_argument(
        "--host",
        help="the TakoformHost to read from, also written as spec.hostRef (default: the host "
        "marked default, else the implicit host `default`; no spec.hostRef)",
    )
    imports.add_argument("--kind", help="the CR kind, for an id that names no FormRef")
    imports.add_argument("--space", help="the space, for an id that names none")
    imports.add_argument(
        "--deletion-policy",
        choices=("Delete", "Orphan"),
        default="Orphan",
        help="spec.deletionPolicy of the CR (default: Orphan: deleting the CR leaves the host "
        "resource)",
    )
    _common(imports)
    imports.set_defaults(handler=_guarded(run_import))

    blocked = commands.add_parser(
        "blocked",
        help="list Blocked CRs with their reason and remedy",
        description=BLOCKED_DESCRIPTION,
        formatter_class=Formatter,
    )
    scope = blocked.add_mutually_exclusive_group()
    scope.add_argument(
        "-A", "--all-namespaces", action="store_true", help="list them in every namespace"
    )
    scope.add_argument("-n", "--namespace", help="namespace (default: the context's namespace)")
    _output(blocked)
    _common(blocked, host=False)
    blocked.set_defaults(handler=_guarded(run_blocked))

    trace = commands.add_parser(
        "trace",
        help="show a CR, its FormRef, host resource, pending operation and events",
        description=TRACE_DESCRIPTION,
        formatter_class=Formatter,
    )
    trace.add_argument(
        "resource", metavar="KIND/NAME", help="e.g. bucket/logs or buckets.storage.takoform.io/logs"
    )
    trace.add_argument("-n", "--namespace", help="namespace (default: the context's namespace)")
    trace.add_argument(
        "--events", type=int, default=10, metavar="N", help="how many events (default: 10)"
    )
    _output(trace)
    _common(trace)
    trace.set_defaults(handler=_guarded(run_trace))

    bindings = commands.add_parser(
        "bindings",
        help="list the TakoformBindings: which CR owns which host resource",
        description=BINDINGS_DESCRIPTION,
        formatter_class=Formatter,
    )
    bindings.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        help="accepted as with kubectl; bindings are cluster-scoped and all are listed anyway",
    )
    _output(bindings)
    _common(bindings, host=False)
    bindings.set_defaults(handler=_guarded(run_bindings))

    release = commands.add_parser(
        "release",
        help="release a Released or Lost host resource, or reserve it for one CR",
        description=RELEASE_DESCRIPTION,
        formatter_class=Formatter,
    )
    release.add_argument("binding", metavar="BINDING", help="the TakoformBinding's name (tb-...)")
    release.add_argument(
        "--to",
        metavar="NAMESPACE/NAME",
        help="reserve the binding for that CR instead of deleting it",
    )
    release.add_argument(
        "--force",
        action="store_true",
        help="also a binding Bound to a CR, overriding its protection (see above)",
    )
    release.add_argument(
        "--yes",
        action="store_true",
        help="hand it to another namespace without asking (see above)",
    )
    _common(release, host=False)
    release.set_defaults(handler=_guarded(run_release))


def parser(prog: str) -> argparse.ArgumentParser:
    """The `kubectl takoform` command line."""
    from takoform_operator.version import build_info

    top = argparse.ArgumentParser(prog=prog, description=DESCRIPTION, formatter_class=Formatter)
    version = f"{prog} {build_info()['version']} (the takoform-operator package)"
    top.add_argument("--version", action="version", version=version)
    add_commands(top.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    return top


def _guarded(command: Callable[[argparse.Namespace, TextIO], int]) -> Callable[..., int]:
    """Run a command; what can go wrong ends as one line on stderr, never a traceback."""

    def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
        try:
            return command(args, out or sys.stdout)
        except (UsageError, InvalidImportId) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except PluginError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()
            )
            print(f"error: invalid TAKOFORM_* settings: {problems}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            return 130

    return run


# -- import ---------------------------------------------------------------------------------------


def _import_line(registry: Registry, text: str, kind: str | None) -> FormLine | None:
    """The Form line named by --kind, or None when the id itself names its FormRef."""
    if kind is not None:
        return resolve_kind(registry, kind)
    names_ref = False
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            return None  # the parser says what is wrong with it
        names_ref = isinstance(doc, dict) and "apiVersion" in doc
    if not names_ref:
        raise UsageError(
            f"import id {text!r} names no FormRef: give the CR kind with --kind (the line's "
            "default create ref is used), or use the canonical JSON id"
        )
    return None


def run_import(args: argparse.Namespace, out: TextIO) -> int:
    registry = load_registry()
    line = _import_line(registry, args.id, args.kind)
    default_ref = registry.default_create_ref(line) if line is not None else None
    target = parse_import_id(args.id, default_ref)
    ref = target.form_ref
    if line is not None and ref.line != line:
        raise UsageError(f"the import id names {ref.line}, but --kind names {line}")
    if not registry.is_supported(ref):
        known = ", ".join(
            f"{r.definition_version} {r.schema_digest}" for r in registry.known_refs(ref.line)
        )
        raise UsageError(
            f"the import id names FormRef {ref}, which this build cannot decode; an import "
            f"under it would be refused (known {ref.kind} refs: {known or 'none'})"
        )
    if args.space and target.space and args.space != target.space:
        raise UsageError(f"--space {args.space!r} differs from the id's space {target.space!r}")
    space = target.space or args.space
    if not space:
        raise UsageError("the import id names no space: put it in the id or give --space")
    cr_name = check_object_name(args.name or target.name)
    settings = Settings()
    cluster = Cluster.connect(args.kubeconfig, args.context)
    try:
        pool, unlisted = host_pool(
            cluster,
            settings,
            args.operator_namespace,
            warn,
            wanted=args.host,
            host_url=args.host_url,
        )
        host = chosen_host(pool, args.host, unlisted)
        document = asyncio.run(_read_resource(pool, host, space, ref, target.name))
        codec = registry.codec_for(ref)
        try:
            parameters = codec.decode(ref, document["spec"])
        except CodecError as exc:
            raise PluginError(f"the host's spec does not decode under {ref}: {exc}") from None
        manifest = import_manifest(
            ref=ref,
            space=space,
            name=target.name,
            parameters=parameters,
            cr_name=cr_name,
            namespace=args.namespace,
            host_ref=args.host,
            pin=ref != registry.default_create_ref(ref.line),
            management=args.management,
            deletion_policy=args.deletion_policy,
        )
        # The host may hold what the CRD's size bounds refuse (a resource made on the host
        # directly): say so now, rather than print a manifest the API server will refuse.
        refusal = cluster.schema_refusal(ref.line, args.namespace or cluster.namespace, manifest)
    finally:
        cluster.close()
    if refusal is not None:
        raise PluginError(
            f"the host's {ref.kind} {target.name!r} does not fit this cluster's "
            f"{ref.line.plural}.{ref.line.group} (its size limits: docs/forms/README.md, Size "
            f"limits), so no CR can import it as it is; the host resource is unchanged. "
            f"The API server says: {refusal}"
        )
    uid = document["metadata"]["uid"]
    out.write(f"# {ref.kind} {target.name} (uid {uid}) in space {space} on host {host}\n")
    out.write(yaml.safe_dump(manifest, sort_keys=False, allow_unicode=True))
    return 0


async def _read_resource(
    pool: HostPool, host: str, space: str, ref: FormRef, name: str
) -> dict[str, Any]:
    try:
        client = await pool.client(host)
        resource = await client.get_resource(space, ref, name)
    except ResourceNotFound:
        raise PluginError(
            f"host {host} has no {ref.kind} {name!r} in space {space!r} under "
            f"{ref.definition_version} {ref.schema_digest}"
        ) from None
    except HostError as exc:
        raise PluginError(host_problem(host, exc)) from None
    finally:
        await pool.aclose()
    return resource.model_dump(by_alias=True)


# -- blocked --------------------------------------------------------------------------------------


def run_blocked(args: argparse.Namespace, out: TextIO) -> int:
    registry = load_registry()
    cluster = Cluster.connect(args.kubeconfig, args.context)
    try:
        namespace = None if args.all_namespaces else (args.namespace or cluster.namespace)
        rows = []
        for line in registry.lines():
            items = cluster.list_crs(line, namespace)
            if items is not None:  # None: that kind's CRD is not installed
                rows += blocked_rows(line, items)
    finally:
        cluster.close()
    if args.output == "table":
        out.write(blocked_report(rows, namespace) + "\n")
    else:
        out.write(dumped(blocked_document(rows), args.output) + "\n")
    return 0


# -- trace ----------------------------------------------------------------------------------------


def run_trace(args: argparse.Namespace, out: TextIO) -> int:
    registry = load_registry()
    kind, name = split_kind_name(args.resource)
    line = resolve_kind(registry, kind)
    cluster = Cluster.connect(args.kubeconfig, args.context)
    try:
        namespace = args.namespace or cluster.namespace
        cr = cluster.get_cr(line, namespace, name)
        if cr is None:
            raise PluginError(f"{resource_of(line)} {name!r} not found in namespace {namespace}")
        status, spec = cr.get("status") or {}, cr.get("spec") or {}
        claimed = bool(status.get("formRef") and status.get("space") and status.get("name"))
        recorded = str(status.get("host") or DEFAULT_HOST)
        host = recorded if claimed else spec.get("hostRef")
        problems: list[str] = []
        if claimed:
            resource, operation = _host_side(cluster, args, status, recorded, problems)
        else:
            resource = Lookup(problem="no target recorded yet, so nothing to read")
            operation = Lookup(problem="no target recorded yet")
        events = cluster.events_of(namespace, str((cr.get("metadata") or {}).get("uid")))
    finally:
        cluster.close()
    seen = Trace(line, cr, host or "(the default host)", resource, operation, events, args.events)
    if args.output == "table":
        out.write(trace_report(seen) + "\n")
    else:
        out.write(dumped(trace_document(seen), args.output) + "\n")
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


def _host_side(
    cluster: Cluster,
    args: argparse.Namespace,
    status: dict[str, Any],
    host: str,
    problems: list[str],
) -> tuple[Lookup, Lookup]:
    """The host resource under the recorded FormRef, and the pending operation (if any)."""
    try:
        ref = FormRef.from_json(dict(status["formRef"]))
    except (KeyError, TypeError, ValueError) as exc:
        return _unread(problems, f"status.formRef is not a FormRef: {exc}")
    try:
        pool, unlisted = host_pool(
            cluster, Settings(), args.operator_namespace, warn, wanted=host, host_url=args.host_url
        )
        chosen_host(pool, host, unlisted)
    except PluginError as exc:
        return _unread(problems, str(exc))
    return asyncio.run(
        _host_reads(pool, host, ref, str(status["space"]), str(status["name"]), status, problems)
    )


async def _host_reads(
    pool: HostPool,
    host: str,
    ref: FormRef,
    space: str,
    name: str,
    status: dict[str, Any],
    problems: list[str],
) -> tuple[Lookup, Lookup]:
    try:
        client = await pool.client(host)
        try:
            resource = Lookup(
                (await client.get_resource(space, ref, name)).model_dump(by_alias=True)
            )
        except ResourceNotFound:
            resource = Lookup()
        except HostError as exc:
            resource = _failed(problems, host_problem(host, exc))
        operation = Lookup()
        pending = status.get("pendingOperationId")
        if pending:
            try:
                operation = Lookup(
                    (await client.get_operation(str(pending))).model_dump(by_alias=True)
                )
            except OperationNotFound:
                operation = Lookup()
            except HostError as exc:
                operation = _failed(problems, host_problem(host, exc))
        return resource, operation
    except HostError as exc:  # building the client: a Secret it needs
        return _unread(problems, host_problem(host, exc))
    except PluginError as exc:  # reading that Secret
        return _unread(problems, str(exc))
    finally:
        await pool.aclose()


def _failed(problems: list[str], problem: str) -> Lookup:
    """A read that failed with `problem`, which the command also reports (and exits 1)."""
    problems.append(problem)
    return Lookup(problem=problem)


def _unread(problems: list[str], problem: str) -> tuple[Lookup, Lookup]:
    """Neither the resource nor the operation read, because of `problem`."""
    failed = _failed(problems, problem)
    return failed, failed


# -- bindings -------------------------------------------------------------------------------------


def _bindings_missing() -> PluginError:
    return PluginError(
        f"{BINDING_PLURAL}.{GROUP} is not installed on this cluster: apply the chart's CRDs "
        "(make crds-upgrade)"
    )


def run_bindings(args: argparse.Namespace, out: TextIO) -> int:
    cluster = Cluster.connect(args.kubeconfig, args.context)
    try:
        items = cluster.list_bindings()
    finally:
        cluster.close()
    if items is None:
        raise _bindings_missing()
    rows = binding_rows(items)
    if args.output == "table":
        out.write(bindings_report(rows) + "\n")
    else:
        out.write(dumped(bindings_document(rows), args.output) + "\n")
    return 0


def _as_now(cluster: Cluster, binding: Binding, claim: ClaimRef) -> ClaimRef:
    """`claim` with the uid its namespace has now, where the binding recorded the uid of a
    namespace of that name (a namespace deleted and created again is another one)."""
    home = binding.home
    if home is None or not home.namespace_uid or home.namespace != claim.namespace:
        return claim
    try:
        uid = cluster.namespace_uid(claim.namespace)
    except Forbidden:
        uid = None
    return replace(claim, namespace_uid=uid or UNKNOWN_UID)


def _confirm(question: str) -> None:
    """Ask on the terminal whether the hand-off `question` states is meant; without one
    (a script, a pipe) it is refused: --yes says it is meant."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise UsageError(f"{question}; nothing was written: confirm it with --yes")
    print(f"{question}.", file=sys.stderr)
    print("Hand it over? [y/N] ", end="", file=sys.stderr, flush=True)
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        raise PluginError("not confirmed: nothing was written")


def run_release(args: argparse.Namespace, out: TextIO) -> int:
    name = binding_name_arg(args.binding)
    claim = claim_arg(args.to) if args.to is not None else None
    cluster = Cluster.connect(args.kubeconfig, args.context)
    try:
        body = cluster.get_binding(name)
        if body is None:
            raise PluginError(
                f"no {BINDING_KIND} named {name!r} (kubectl takoform bindings lists them)"
            )
        try:
            binding = binding_from_json(body)
        except InvalidBinding as exc:
            raise PluginError(
                printable(
                    f"{name}: {exc}; fix it (kubectl edit {BINDING_PLURAL} {name}) or delete it "
                    f"(kubectl delete {BINDING_PLURAL} {name})"
                )
            ) from None
        refusal = release_refusal(name, binding)
        if refusal is not None and not args.force:
            raise PluginError(refusal + " (or override it: --force)")
        if claim is not None and not args.yes:
            question = hand_off(name, binding, _as_now(cluster, binding, claim))
            if question is not None:
                _confirm(question)
        forced = False
        try:
            if refusal is not None:
                body = cluster.replace_binding(name, forced_document(body, binding))
                forced = True
            if claim is not None:
                cluster.replace_binding(name, reserved_document(body, claim))
                said = reserved_message(name, binding, claim)
            else:
                if (body.get("metadata") or {}).get("finalizers"):
                    body = cluster.replace_binding(name, unprotected_document(body))
                metadata = body.get("metadata") or {}
                uid = metadata.get("uid")
                version = str(metadata.get("resourceVersion") or binding.resource_version)
                cluster.delete_binding(name, version, str(uid) if uid else None)
                said = unbound_message(name, binding)
            if refusal is not None:
                said += "\n" + forced_warning(binding)
        except Conflict:
            written = "only the force annotation was written" if forced else "nothing was written"
            raise PluginError(f"{name} changed meanwhile, {written}: run it again") from None
    finally:
        cluster.close()
    out.write(said + "\n")
    return 0
