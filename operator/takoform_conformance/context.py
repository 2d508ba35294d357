"""The run context: an HTTP client bound to one host, one run and one space, and its clean-up.

The context tracks every resource and space a run touches so they are removed afterwards,
whatever happened.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from takoform_spec.host_api import OperationState
from takoform_spec.identity import FormRef

from .answers import clip, describe, error_code, error_details
from .forms import FormModel, InstalledForm
from .outcomes import CheckFailed, CheckSkipped, fail
from .vocabulary import ADMIN, API

#: What the admin faults the suite sets are restored to.
FAULT_DEFAULTS: Mapping[str, Any] = {
    "stuckOperations": False,
    "failNextOperations": 0,
    "latencyMs": 0,
    "errorRate": 0,
    "dropRate": 0,
}


def quote_segment(segment: str) -> str:
    return quote(segment, safe="")


@dataclass
class Tracked:
    space: str
    ref: FormRef
    name: str


@dataclass
class Context:
    """One run against one host: clients, the forms chosen, the run's space, and cleanup."""

    base_url: str
    token: str
    admin_token: str | None = None
    op_timeout: float = 10.0
    poll_interval: float = 0.02
    request_timeout: float = 15.0
    run_id: str = field(default_factory=lambda: secrets.token_hex(4))

    def __post_init__(self) -> None:
        self.base_url = self.base_url.rstrip("/")
        self.http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=self.request_timeout,
        )
        #: A client that sends no Authorization unless told to (auth-required).
        self.raw = httpx.Client(base_url=self.base_url, timeout=self.request_timeout)
        self.admin_http: httpx.Client | None = None
        if self.admin_token:
            self.admin_http = httpx.Client(
                base_url=self.base_url,
                headers={"Authorization": f"Bearer {self.admin_token}"},
                timeout=self.request_timeout,
            )
        self.space = f"conformance-{self.run_id}"
        self.spaces: list[str] = []
        self.tracked: list[Tracked] = []
        self.installed: list[InstalledForm] = []
        self._models: dict[FormRef, FormModel] = {}
        self._counter = 0
        self.cleanup_problems: list[str] = []
        self.changed_faults: dict[str, Any] = {}
        #: (what, prescribed code, response) of the errors provoked once per run (H-2, H-37).
        self.provoked: list[tuple[str, str, httpx.Response]] | None = None
        self.primary: FormRef
        self.sibling: FormRef | None = None

    def create_space(self, space: str) -> httpx.Response:
        self.spaces.append(space)
        return self.http.put(f"{API}/spaces/{quote_segment(space)}")

    def refs_of_line(self, ref: FormRef) -> list[FormRef]:
        """The ref a resource was created under first, then the line's other installed refs."""
        rest = [f.ref for f in self.installed if f.ref.line == ref.line and f.ref != ref]
        return [ref, *rest]

    # ---- names ----------------------------------------------------------------------------

    def name(self, hint: str) -> str:
        self._counter += 1
        return f"{hint}-{self._counter}"

    def key(self) -> str:
        self._counter += 1
        return f"conformance-{self.run_id}-{self._counter}-{secrets.token_hex(4)}"

    # ---- forms ----------------------------------------------------------------------------

    def model(self, ref: FormRef | None = None) -> FormModel:
        ref = ref or self.primary
        if ref not in self._models:
            response = self.http.get(self.form_path(ref, "definition"), params=self.query(ref))
            if response.status_code != 200:
                raise CheckFailed(f"H-9: definition read of {ref} answered {describe(response)}")
            self._models[ref] = FormModel(ref, response.json()["schema"])
        return self._models[ref]

    def need_sibling(self) -> FormRef:
        if self.sibling is None:
            raise CheckSkipped(
                f"the host installs only one definition of {self.primary.line}; "
                "needs two of one Form line"
            )
        return self.sibling

    def unknown_version(self, ref: FormRef) -> FormRef:
        installed = {f.ref.definition_version for f in self.installed if f.ref.line == ref.line}
        major = 90
        while f"{major}.0.0" in installed:
            major += 1
        return FormRef(ref.api_version, ref.kind, f"{major}.0.0", ref.schema_digest)

    def unknown_digest(self, ref: FormRef) -> FormRef:
        return FormRef(
            ref.api_version, ref.kind, ref.definition_version, "sha256:" + secrets.token_hex(32)
        )

    # ---- paths ----------------------------------------------------------------------------

    @staticmethod
    def query(ref: FormRef) -> dict[str, str]:
        return {"definitionVersion": ref.definition_version, "schemaDigest": ref.schema_digest}

    @staticmethod
    def form_path(ref: FormRef, what: str) -> str:
        line = ref.line
        return f"{API}/forms/{line.group}/{line.version}/{quote_segment(ref.kind)}/{what}"

    def resource_path(self, name: str, ref: FormRef | None = None, space: str | None = None) -> str:
        ref = ref or self.primary
        line = ref.line
        return (
            f"{API}/spaces/{quote_segment(space or self.space)}/forms/{line.group}/{line.version}/"
            f"{quote_segment(ref.kind)}/resources/{quote_segment(name)}"
        )

    # ---- resource requests ----------------------------------------------------------------

    def track(self, name: str, ref: FormRef | None, space: str | None) -> None:
        self.tracked.append(Tracked(space or self.space, ref or self.primary, name))

    def create(
        self,
        name: str,
        spec: Mapping[str, Any] | None = None,
        *,
        ref: FormRef | None = None,
        space: str | None = None,
        key: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        ref = ref or self.primary
        body_spec = self.model(ref).valid_spec() if spec is None else spec
        sent = {"If-None-Match": "*", **_fence_headers(key=key), **(headers or {})}
        self.track(name, ref, space)
        return self.http.put(
            self.resource_path(name, ref, space),
            params=self.query(ref),
            json={"spec": body_spec},
            headers=sent,
        )

    def update(
        self,
        name: str,
        spec: Mapping[str, Any],
        generation: str | None,
        *,
        ref: FormRef | None = None,
        key: str | None = None,
        if_match: str | None = None,
        uid: str | None = None,
    ) -> httpx.Response:
        ref = ref or self.primary
        sent = _fence_headers(key=key, if_match=if_match, uid=uid)
        if generation is not None:
            sent["Takoform-Expected-Generation"] = str(generation)
        return self.http.put(
            self.resource_path(name, ref), params=self.query(ref), json={"spec": spec}, headers=sent
        )

    def delete(
        self,
        name: str,
        *,
        ref: FormRef | None = None,
        key: str | None = None,
        if_match: str | None = None,
        uid: str | None = None,
    ) -> httpx.Response:
        ref = ref or self.primary
        sent = _fence_headers(key=key, if_match=if_match, uid=uid)
        return self.http.delete(self.resource_path(name, ref), params=self.query(ref), headers=sent)

    def read(
        self, name: str, ref: FormRef | None = None, space: str | None = None
    ) -> httpx.Response:
        ref = ref or self.primary
        return self.http.get(self.resource_path(name, ref, space), params=self.query(ref))

    def observe(self, name: str, ref: FormRef | None = None) -> httpx.Response:
        ref = ref or self.primary
        return self.http.post(self.resource_path(name, ref) + "/observe", params=self.query(ref))

    def get_operation(self, op_id: str) -> httpx.Response:
        return self.http.get(f"{API}/operations/{quote_segment(op_id)}")

    # ---- expectations -----------------------------------------------------------------------

    @staticmethod
    def body(response: httpx.Response, what: str) -> dict[str, Any]:
        try:
            doc = response.json()
        except ValueError:
            raise fail(f"{what}: body is not JSON: {clip(response.text)!r}") from None
        if not isinstance(doc, dict):
            raise fail(f"{what}: body is not a JSON object")
        return doc

    def accepted(self, response: httpx.Response, what: str) -> dict[str, Any]:
        """A mutation's 202 with its operation record."""
        if response.status_code != 202:
            raise fail(f"{what}: expected 202 Accepted, got {describe(response)}")
        record = self.body(response, what)
        if not isinstance(record.get("id"), str) or not record["id"]:
            raise fail(f"H-31: {what}: the 202 body is not an operation record with an id")
        return record

    def wait(self, op_id: str, *, timeout: float | None = None) -> dict[str, Any]:
        """Poll an operation until it settles; its final record."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.op_timeout)
        interval = self.poll_interval
        while True:
            response = self.get_operation(op_id)
            if response.status_code != 200:
                raise fail(f"H-33: GET operation {op_id} answered {describe(response)}")
            record = self.body(response, f"operation {op_id}")
            if record.get("state") != OperationState.RUNNING:
                return record
            if time.monotonic() > deadline:
                raise fail(f"operation {op_id} still running after {self.op_timeout:.0f}s")
            time.sleep(interval)
            interval = min(interval * 1.5, 0.25)

    def settle(self, response: httpx.Response, what: str) -> dict[str, Any]:
        """A 202 whose operation must succeed; its final record."""
        record = self.accepted(response, what)
        final = self.wait(record["id"])
        if final.get("state") != OperationState.SUCCEEDED:
            raise fail(
                f"{what}: operation {record['id']} ended {final.get('state')!r}: "
                f"{final.get('error')}"
            )
        return final

    def representation(
        self, name: str, ref: FormRef | None = None, what: str = ""
    ) -> dict[str, Any]:
        response = self.read(name, ref)
        if response.status_code != 200:
            raise fail(
                f"read of {name!r}{' ' + what if what else ''}: expected 200, "
                f"got {describe(response)}"
            )
        return self.body(response, f"read of {name!r}")

    def make(
        self,
        hint: str,
        spec: Mapping[str, Any] | None = None,
        *,
        ref: FormRef | None = None,
        key: str | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """Create a resource, wait for it to commit; its name and committed representation."""
        name = self.name(hint)
        self.settle(self.create(name, spec, ref=ref, key=key), f"create {name!r}")
        return name, self.representation(name, ref, "after its create succeeded")

    def change(
        self, name: str, rep: Mapping[str, Any], ref: FormRef | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Update to a changed spec (fenced on the current generation); the new representation."""
        spec = self.model(ref).changed(rep["spec"])
        self.settle(
            self.update(name, spec, rep["metadata"]["generation"], ref=ref, **kwargs),
            f"update of {name!r}",
        )
        return self.representation(name, ref, "after its update succeeded")

    def expect_error(
        self, response: httpx.Response, status: int, code: str, cite: str, what: str
    ) -> dict[str, Any]:
        """Assert an error answer; its details."""
        if response.status_code != status or error_code(response) != code:
            raise fail(f"{cite}: {what}: expected {status} {code}, got {describe(response)}")
        return error_details(response)

    def expect_absent(self, name: str, cite: str, what: str, ref: FormRef | None = None) -> None:
        self.expect_error(
            self.read(name, ref), 404, "resource_not_found", cite, f"{what}: read of {name!r}"
        )

    # ---- admin ------------------------------------------------------------------------------

    def need_admin(self, why: str) -> httpx.Client:
        if self.admin_http is None:
            raise CheckSkipped(f"needs --admin-token ({why})")
        return self.admin_http

    def admin(self, method: str, path: str, body: Any = None) -> httpx.Response:
        client = self.need_admin(f"{method} {path}")
        response = client.request(method, ADMIN + path, json=body)
        if response.status_code >= 300:
            raise fail(f"admin {method} {path} answered {describe(response)}")
        return response

    @contextlib.contextmanager
    def faults(self, **faults: Any) -> Iterator[None]:
        """Set admin faults for the block; put the previous values back afterwards."""
        previous = dict(FAULT_DEFAULTS)
        current = self.need_admin("faults").get(ADMIN + "/faults")
        if current.status_code == 200 and isinstance(current.json(), dict):
            previous.update(current.json())
        restore = {k: previous.get(k) for k in faults}
        for key, value in restore.items():
            self.changed_faults.setdefault(key, value)
        self.admin("PUT", "/faults", faults)
        try:
            yield
        finally:
            self.admin("PUT", "/faults", restore)

    def release(self) -> None:
        self.admin("PUT", "/faults", {"stuckOperations": False})

    def restore_faults(self) -> None:
        changed = self.changed_faults
        if changed and self.admin_http is not None:
            self.admin_http.put(ADMIN + "/faults", json=changed)


def _fence_headers(
    *, key: str | None = None, if_match: str | None = None, uid: str | None = None
) -> dict[str, str]:
    """The optional mutation headers of docs/host-api.md section 6, as one mapping."""
    sent: dict[str, str] = {}
    if if_match is not None:
        sent["If-Match"] = if_match
    if uid is not None:
        sent["Takoform-Expected-Uid"] = uid
    if key:
        sent["Idempotency-Key"] = key
    return sent
