"""The cluster as the plugin sees it, with the user's kubeconfig: CRs, Events, TakoformHosts, the
Secrets a host names (and the annotations of its namespace's, to find the implicit host), and
TakoformBindings. The only writes are `release`'s, of one
TakoformBinding, each conditioned on the resourceVersion read. Every failure becomes a
PluginError with one clear line."""

from __future__ import annotations

import base64
import functools
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from urllib3.exceptions import HTTPError

from takoform_operator.core.binding import BINDING_PLURAL
from takoform_operator.core.depth import safe_loads
from takoform_operator.core.tenancy import GROUP, HOST_PLURAL, VERSION
from takoform_operator.kube.json_seam import LIST_LIMIT
from takoform_spec.identity import FormLine

IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
REQUEST_TIMEOUT = 15.0


class PluginError(Exception):
    """A failure the user can act on: printed as one line, exit status 1."""


class Forbidden(PluginError):
    """The user's credentials may not make this read (RBAC)."""


class Conflict(PluginError):
    """A conditional write found the object changed since it was read (409), or gone."""


class Cluster:
    """Reads through the official client (synchronous: a command makes a handful of calls)."""

    def __init__(self, api: Any, namespace: str, server: str) -> None:
        self._api = api
        self.namespace = namespace
        self.server = server
        self._objects = k8s.CustomObjectsApi(api)

    @functools.cached_property
    def _core(self) -> Any:
        # Built on first use: the module behind it takes seconds to import, `blocked` needs none.
        return k8s.CoreV1Api(self._api)

    @classmethod
    def connect(cls, kubeconfig: str | None, context: str | None) -> Cluster:
        """The user's kubeconfig (--kubeconfig, KUBECONFIG, ~/.kube/config), else the pod's
        ServiceAccount; the namespace is the context's (else `default`)."""
        has_file = bool(kubeconfig or os.environ.get("KUBECONFIG")) or os.path.exists(
            os.path.expanduser("~/.kube/config")
        )
        try:
            if has_file or context:
                configuration = k8s.Configuration()
                k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=kubeconfig, context=context, client_configuration=configuration
                )
                # One answer is enough to say the cluster is unreachable (urllib3 retries 3x).
                configuration.retries = 1
                api = k8s.ApiClient(configuration)
                contexts, active = k8s_config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
                    config_file=kubeconfig
                )
                if context:
                    active = next((c for c in contexts if c.get("name") == context), active)
                namespace = (active or {}).get("context", {}).get("namespace") or "default"
            elif not os.environ.get("KUBERNETES_SERVICE_HOST"):
                raise PluginError(
                    "no kubeconfig: set KUBECONFIG, pass --kubeconfig, or create ~/.kube/config"
                )
            else:
                configuration = k8s.Configuration()
                k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
                    client_configuration=configuration
                )
                configuration.retries = 1
                api = k8s.ApiClient(configuration)
                namespace = IN_CLUSTER_NAMESPACE.read_text(encoding="utf-8").strip()
        except (ConfigException, OSError, TypeError, ValueError) as exc:
            raise PluginError(f"cannot load the kubeconfig: {exc}") from None
        return cls(api, namespace, str(api.configuration.host))

    def close(self) -> None:
        self._api.close()

    # -- reads -----------------------------------------------------------------------------------

    def list_crs(self, line: FormLine, namespace: str | None) -> list[dict[str, Any]] | None:
        """The CRs of one Form line (None when its CRD is not installed)."""
        group, version = line.group, line.version
        if namespace is None:
            call = lambda: self._objects.list_cluster_custom_object(  # noqa: E731
                group, version, line.plural, _preload_content=False, **_timeout()
            )
        else:
            call = lambda: self._objects.list_namespaced_custom_object(  # noqa: E731
                group, version, namespace, line.plural, _preload_content=False, **_timeout()
            )
        document = self._read(call, f"list {line.plural}.{group}", missing_ok=True)
        return None if document is None else list(document.get("items") or [])

    def get_cr(self, line: FormLine, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read(
            lambda: self._objects.get_namespaced_custom_object(
                line.group,
                line.version,
                namespace,
                line.plural,
                name,
                _preload_content=False,
                **_timeout(),
            ),
            f"get {line.plural}.{line.group} {namespace}/{name}",
            missing_ok=True,
        )

    def schema_refusal(self, line: FormLine, namespace: str, body: dict[str, Any]) -> str | None:
        """Why the API server would refuse `body` as a new CR of `line` (its CRD's schema and
        size bounds, or an admission policy), by a server-side dry run that stores nothing; None
        when it would be accepted, or when the dry run cannot tell (no right to create there,
        the name is taken, the CRD is not installed): applying it says so then."""
        try:
            self._objects.create_namespaced_custom_object(
                line.group,
                line.version,
                namespace,
                line.plural,
                body,
                dry_run="All",
                _preload_content=False,
                **_timeout(),
            )
        except ApiException as exc:
            return _api_reason(exc) if exc.status == 422 else None
        except (OSError, HTTPError):
            return None
        return None

    def events_of(self, namespace: str, uid: str) -> list[dict[str, Any]]:
        """The core/v1 Events whose involvedObject is the object `uid`."""
        document = self._read(
            lambda: self._core.list_namespaced_event(
                namespace,
                field_selector=f"involvedObject.uid={uid}",
                _preload_content=False,
                **_timeout(),
            ),
            f"list events in {namespace}",
        )
        return list((document or {}).get("items") or [])

    def takoform_hosts(self) -> list[dict[str, Any]]:
        """Every TakoformHost (none when the CRD is not installed)."""
        document = self._read(
            lambda: self._objects.list_cluster_custom_object(
                GROUP, VERSION, HOST_PLURAL, _preload_content=False, **_timeout()
            ),
            "list takoformhosts",
            missing_ok=True,
        )
        return list((document or {}).get("items") or [])

    def secret_data(
        self, namespace: str, name: str
    ) -> tuple[Mapping[str, bytes], Mapping[str, str]] | None:
        """The data and annotations of one Secret (None when it does not exist)."""
        document = self._read(
            lambda: self._core.read_namespaced_secret(
                name, namespace, _preload_content=False, **_timeout()
            ),
            f"get secret {namespace}/{name}",
            missing_ok=True,
        )
        if document is None:
            return None
        data = {k: base64.b64decode(v) for k, v in (document.get("data") or {}).items()}
        annotations = (document.get("metadata") or {}).get("annotations") or {}
        return data, {str(k): str(v) for k, v in annotations.items()}

    def secret_annotations(self, namespace: str) -> dict[str, dict[str, str]]:
        """The annotations of every Secret of `namespace`, by name (no data is kept)."""
        document = self._read(
            lambda: self._core.list_namespaced_secret(
                namespace, _preload_content=False, **_timeout()
            ),
            f"list secrets in {namespace}",
        )
        return {
            str(metadata.get("name")): {str(k): str(v) for k, v in annotations.items()}
            for item in (document or {}).get("items") or []
            for metadata in [item.get("metadata") or {}]
            for annotations in [metadata.get("annotations") or {}]
        }

    def namespace_uid(self, name: str) -> str | None:
        """The uid of namespace `name` (None when it does not exist)."""
        document = self._read(
            lambda: self._core.read_namespace(name, _preload_content=False, **_timeout()),
            f"get namespace {name}",
            missing_ok=True,
        )
        uid = ((document or {}).get("metadata") or {}).get("uid")
        return str(uid) if uid else None

    # -- TakoformBindings (cluster-scoped) -------------------------------------------------------

    def list_bindings(self) -> list[dict[str, Any]] | None:
        """Every TakoformBinding (None when the CRD is not installed)."""
        document = self._read(
            lambda: self._objects.list_cluster_custom_object(
                GROUP, VERSION, BINDING_PLURAL, _preload_content=False, **_timeout()
            ),
            f"list {BINDING_PLURAL}",
            missing_ok=True,
        )
        return None if document is None else list(document.get("items") or [])

    def get_binding(self, name: str) -> dict[str, Any] | None:
        return self._read(
            lambda: self._objects.get_cluster_custom_object(
                GROUP, VERSION, BINDING_PLURAL, name, _preload_content=False, **_timeout()
            ),
            f"get {BINDING_PLURAL} {name}",
            missing_ok=True,
        )

    def replace_binding(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """PUT the whole object; its metadata.resourceVersion is the precondition. Raises
        Conflict when the object changed since (or is gone)."""
        document = self._read(
            lambda: self._objects.replace_cluster_custom_object(
                GROUP, VERSION, BINDING_PLURAL, name, body, _preload_content=False, **_timeout()
            ),
            f"replace {BINDING_PLURAL} {name}",
            missing_ok=True,
        )
        if document is None:
            raise Conflict(f"{name} is gone")
        return document

    def delete_binding(self, name: str, resource_version: str, uid: str | None) -> None:
        """DELETE on the condition that the object is still the one read (its resourceVersion and
        uid). Raises Conflict when it changed since, or is gone."""
        options = k8s.V1DeleteOptions(
            preconditions=k8s.V1Preconditions(resource_version=resource_version, uid=uid)
        )
        document = self._read(
            lambda: self._objects.delete_cluster_custom_object(
                GROUP,
                VERSION,
                BINDING_PLURAL,
                name,
                body=options,
                _preload_content=False,
                **_timeout(),
            ),
            f"delete {BINDING_PLURAL} {name}",
            missing_ok=True,
        )
        if document is None:
            raise Conflict(f"{name} is gone")

    def _read(
        self, call: Callable[[], Any], what: str, *, missing_ok: bool = False
    ) -> dict[str, Any] | None:
        try:
            response = call()
        except ApiException as exc:
            if exc.status == 404 and missing_ok:
                return None
            if exc.status == 403:
                raise Forbidden(f"{what}: forbidden: {_api_reason(exc)}") from None
            if exc.status == 409:
                raise Conflict(f"{what}: {_api_reason(exc)}") from None
            raise PluginError(f"{what}: {exc.status} {_api_reason(exc)}") from None
        except (HTTPError, OSError) as exc:
            raise PluginError(f"cannot reach the cluster at {self.server}: {_cause(exc)}") from None
        try:
            # Depth-safe, as the operator reads: one old object nested deeper than Python's
            # json goes (about 1,000 levels) is cut where it is too deep, not a traceback.
            document = safe_loads(response.data, LIST_LIMIT)
        except ValueError:
            raise PluginError(f"{what}: the API server answered something not JSON") from None
        return document if isinstance(document, dict) else None


def _timeout() -> dict[str, Any]:
    return {"_request_timeout": REQUEST_TIMEOUT}


def _api_reason(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "")["message"])
    except (ValueError, TypeError, KeyError):
        return str(exc.reason)


def _cause(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason or exc).splitlines()[0]
