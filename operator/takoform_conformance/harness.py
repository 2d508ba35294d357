"""The machinery the checks run on: an HTTP context bound to one host, one run, one space.

A check is a function of a `Context`. It raises `CheckFailed` (naming the H-rule it caught being
broken) or `CheckSkipped` (saying why it could not run), and otherwise passes. The context tracks
every resource and space a run touches so they are removed afterwards, whatever happened.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from takoform_spec.identity import FormRef, parse_definition_version

API = "/v1alpha3"
ADMIN = "/admin/v1"

#: Section 9 of docs/host-api.md: the closed set of error codes and their HTTP status
#: (None: only ever carried by a failed operation record).
ERROR_CODES: dict[str, int | None] = {
    "invalid_request": 400,
    "unauthenticated": 401,
    "forbidden": 403,
    "space_not_found": 404,
    "form_unknown": 404,
    "resource_not_found": 404,
    "operation_not_found": 404,
    "route_not_found": 404,
    "method_not_allowed": 405,
    "operation_in_progress": 409,
    "space_not_empty": 409,
    "resource_exists": 412,
    "generation_conflict": 412,
    "revision_conflict": 412,
    "uid_mismatch": 412,
    "payload_too_large": 413,
    "unsupported_media_type": 415,
    "validation_failed": 422,
    "idempotency_key_reused": 422,
    "precondition_required": 428,
    "provisioning_failed": None,
    "internal": 500,
    "unavailable": 503,
}
CONDITION_TYPES = frozenset({"Ready", "Reconciling", "Degraded", "Drifted", "Blocked", "Deleting"})
CONDITION_REASONS = frozenset(
    {"Available", "Provisioning", "Updating", "Deleting", "Failed", "DriftDetected", "Observed"}
)
OPERATION_STATES = frozenset({"running", "succeeded", "failed"})
DECIMAL = re.compile(r"^(0|[1-9][0-9]*)$")

#: What the admin faults the suite sets are restored to.
FAULT_DEFAULTS: Mapping[str, Any] = {
    "stuckOperations": False,
    "failNextOperations": 0,
    "latencyMs": 0,
    "errorRate": 0,
    "dropRate": 0,
}

#: The Form line the suite prefers (docs/forms: Bucket has three definition versions).
PREFERRED_LINE = ("storage.takoform.io/v1", "Bucket")


class CheckFailed(Exception):
    """The host broke a rule; the message names it."""


class CheckSkipped(Exception):
    """The check could not run against this host or with these credentials."""


class HostUnusable(Exception):
    """The host cannot be tested at all (unreachable, token refused): a usage error, exit 2."""


def fail(message: str) -> CheckFailed:
    return CheckFailed(message)


def ensure(condition: object, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def describe(response: httpx.Response) -> str:
    """A short description of a response for failure messages."""
    code = error_code(response)
    if code is not None:
        message = response.json()["error"].get("message", "")
        return f"{response.status_code} {code} ({_clip(str(message))})"
    return f"{response.status_code} {_clip(response.text)!r}"


def _clip(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def error_code(response: httpx.Response) -> str | None:
    """The `error.code` of an error body, or None when the body is not the H-2 shape."""
    try:
        body = response.json()
    except ValueError:
        return None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        code = body["error"].get("code")
        return code if isinstance(code, str) else None
    return None


def error_details(response: httpx.Response) -> dict[str, Any]:
    details = response.json()["error"].get("details")
    return details if isinstance(details, dict) else {}


def unquote_etag(value: object) -> str:
    text = str(value)
    if text.startswith("W/"):
        text = text[2:]
    return text.strip('"')


@dataclass(frozen=True)
class Check:
    """One named check: the H-numbers it proves and how it runs."""

    name: str
    cites: tuple[str, ...]
    func: Callable[[Context], None]
    required: bool = True
    #: "no": runs without the admin API; "optional": proves more with it; "required": skipped
    #: without it.
    admin: str = "no"
    summary: str = ""


@dataclass
class CheckResult:
    name: str
    cites: tuple[str, ...]
    required: bool
    result: str  # "pass" | "fail" | "skipped"
    reason: str = ""
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.result == "fail"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cites": list(self.cites),
            "required": self.required,
            "result": self.result,
            "reason": self.reason,
            "seconds": round(self.seconds, 3),
        }


# --------------------------------------------------------------------------------------------
# Forms: what the host has installed, and how to write valid and invalid specs for one of them.


@dataclass
class InstalledForm:
    ref: FormRef
    package_digests: list[str]


_EXAMPLE = re.compile(r"e\.g\.\s+([^\s,;()]+)")
_FALLBACK_STRINGS = ("eu-west-1", "500Gi", "conformance", "example.com", "a", "10.0.0.0/16", "1")


class FormModel:
    """The field declarations of one exact definition (the `schema` of its definition read)."""

    def __init__(self, ref: FormRef, schema: Mapping[str, Any]) -> None:
        self.ref = ref
        self.schema = schema
        fields = schema.get("fields")
        if not isinstance(fields, list):
            raise CheckFailed(f"the definition of {ref} has no `fields` list; cannot build specs")
        self.fields: dict[str, dict[str, Any]] = {
            f["name"]: f for f in fields if isinstance(f, dict) and isinstance(f.get("name"), str)
        }

    @property
    def required(self) -> list[str]:
        return [name for name, f in self.fields.items() if f.get("required")]

    def example(self, name: str) -> Any:
        return self._value(self.fields[name], name)

    def _value(self, f: Mapping[str, Any], name: str) -> Any:
        kind = f.get("type")
        if f.get("enum"):
            return f["enum"][0]
        if kind == "string":
            return self._string(f, name)
        if kind in ("integer", "number"):
            low = f.get("minimum", 1)
            high = f.get("maximum")
            value = max(low, 1) if high is None or high >= 1 else high
            value = min(value * 10, high) if high is not None else value * 10
            return int(value) if kind == "integer" else float(value)
        if kind == "boolean":
            return False
        if kind == "array":
            return [self._value({"type": f.get("items", "string")}, name)]
        if kind == "map":
            return {"conformance": self._value({"type": f.get("values", "string")}, name)}
        raise CheckFailed(f"{self.ref}: field {name!r} has a type the suite cannot fill: {kind!r}")

    def _string(self, f: Mapping[str, Any], name: str) -> str:
        candidates = [m.rstrip(".") for m in _EXAMPLE.findall(str(f.get("description", "")))]
        candidates += list(_FALLBACK_STRINGS)
        pattern = f.get("pattern")
        for candidate in candidates:
            if pattern and not re.search(pattern, candidate):
                continue
            if len(candidate) < f.get("minLength", 0):
                continue
            if len(candidate) > f.get("maxLength", 1 << 30):
                continue
            return str(candidate)
        raise CheckFailed(f"{self.ref}: cannot find a valid example for field {name!r}")

    def valid_spec(self) -> dict[str, Any]:
        """A minimal valid spec: the required fields only."""
        return {name: self.example(name) for name in self.required}

    def mutable_field(self) -> str:
        """A field an update may change (not immutable; integer, boolean or enum)."""
        ranked = sorted(
            (name for name, f in self.fields.items() if not f.get("immutable")),
            key=lambda n: (
                not self.fields[n].get("required"),
                self.fields[n].get("type") != "integer",
            ),
        )
        for name in ranked:
            f = self.fields[name]
            if f.get("type") in ("integer", "boolean") or (f.get("enum") and len(f["enum"]) > 1):
                return name
        raise CheckSkipped(f"{self.ref} declares no field the suite knows how to change")

    def changed(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """`spec` with its mutable field set to a different valid value."""
        name = self.mutable_field()
        f = self.fields[name]
        current = spec.get(name, f.get("default", self.example(name)))
        new: Any
        if f.get("enum"):
            new = next(v for v in f["enum"] if v != current)
        elif f.get("type") == "boolean":
            new = not current
        else:
            high = f.get("maximum")
            new = current + 1 if high is None or current + 1 <= high else current - 1
        return {**spec, name: new}

    def defaulted_optional(self) -> tuple[str, Any] | None:
        for name, f in self.fields.items():
            if not f.get("required") and "default" in f:
                return name, f["default"]
        return None

    def invalid_specs(self, sibling_fields: set[str]) -> list[tuple[str, dict[str, Any], str]]:
        """(what, spec, field the error must name) for specs the exact definition refuses."""
        base = self.valid_spec()
        cases: list[tuple[str, dict[str, Any], str]] = [
            ("an undeclared field", {**base, "conformanceUndeclared": "x"}, "conformanceUndeclared")
        ]
        for name in sorted(sibling_fields - set(self.fields)):
            value = True if name == "versioning" else 1
            cases.append(
                (
                    f"field {name!r} declared only by another definition of the line",
                    {**base, name: value},
                    name,
                )
            )
            break
        if "name" not in self.fields:
            cases.append(("an envelope field `name` in spec (0011)", {**base, "name": "x"}, "name"))
        for name in self.required:
            spec = dict(base)
            del spec[name]
            cases.append((f"missing required field {name!r}", spec, name))
            break
        for name, f in self.fields.items():
            kind = f.get("type")
            wrong: Any = {"integer": "ten", "number": "ten", "boolean": "yes", "string": 12}.get(
                str(kind), 12
            )
            cases.append((f"wrong type for {kind} field {name!r}", {**base, name: wrong}, name))
            break
        for name, f in self.fields.items():
            if f.get("type") in ("integer", "number") and "minimum" in f:
                cases.append((f"{name} below its minimum", {**base, name: f["minimum"] - 1}, name))
            if f.get("type") in ("integer", "number") and "maximum" in f:
                cases.append((f"{name} above its maximum", {**base, name: f["maximum"] + 1}, name))
            if f.get("type") == "string" and f.get("pattern"):
                cases.append(
                    (f"{name} not matching its pattern", {**base, name: "NOT VALID"}, name)
                )
            if f.get("type") == "map" and f.get("values") == "string":
                cases.append((f"{name} with a non-string value", {**base, name: {"k": 1}}, name))
        return cases


# --------------------------------------------------------------------------------------------
# The context.


def _quote(segment: str) -> str:
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

    # ---- set-up and tear-down -----------------------------------------------------------

    def preflight(self) -> None:
        """Reach the host and list its forms; HostUnusable when it cannot be tested at all."""
        try:
            response = self.http.get(f"{API}/forms")
        except httpx.TransportError as exc:
            raise HostUnusable(f"cannot reach the host at {self.base_url}: {exc}") from None
        except httpx.InvalidURL as exc:
            raise HostUnusable(f"invalid host URL {self.base_url!r}: {exc}") from None
        if response.status_code == 401:
            raise HostUnusable(f"the host at {self.base_url} refused the token (401)")
        if response.status_code != 200:
            raise HostUnusable(
                f"GET {API}/forms answered {describe(response)}; is {self.base_url} a Takoform "
                "v1alpha3 host?"
            )
        try:
            items = response.json()["items"]
            self.installed = [
                InstalledForm(FormRef.from_json(item["formRef"]), list(item["packageDigests"]))
                for item in items
            ]
        except (ValueError, KeyError, TypeError) as exc:
            raise HostUnusable(
                f"GET {API}/forms did not list forms as H-API §3 says: {exc}"
            ) from None
        if not self.installed:
            raise HostUnusable("the host has no Forms installed; nothing can be checked")
        if self.admin_http is not None:
            try:
                admin = self.admin_http.get(f"{ADMIN}/misbehaviours")
            except httpx.TransportError as exc:
                raise HostUnusable(f"admin API unreachable: {exc}") from None
            if admin.status_code != 200:
                raise HostUnusable(
                    f"the admin token was given but GET {ADMIN}/misbehaviours answered "
                    f"{describe(admin)}"
                )
        self._choose_forms()

    def _choose_forms(self) -> None:
        lines: dict[tuple[str, str], list[FormRef]] = {}
        for form in self.installed:
            lines.setdefault((form.ref.api_version, form.ref.kind), []).append(form.ref)
        if PREFERRED_LINE in lines:
            line = PREFERRED_LINE
        else:
            line = max(lines, key=lambda key: (len(lines[key]), key))
        refs = sorted(lines[line], key=lambda r: parse_definition_version(r.definition_version))
        self.primary = refs[0]
        same_major = [r for r in refs[1:] if r.major == self.primary.major]
        others = same_major or refs[1:]
        self.sibling = others[0] if others else None

    def create_space(self, space: str) -> httpx.Response:
        self.spaces.append(space)
        return self.http.put(f"{API}/spaces/{_quote(space)}")

    def setup_space(self) -> None:
        response = self.create_space(self.space)
        if response.status_code not in (200, 201):
            raise CheckFailed(f"§2: PUT space {self.space!r} answered {describe(response)}")

    def cleanup(self) -> None:
        """Remove every resource and space this run created, best effort, never raising."""
        with contextlib.suppress(Exception):
            self._restore_faults()
        pending: list[tuple[Tracked, str]] = []
        seen: set[tuple[str, str]] = set()
        for item in reversed(self.tracked):
            key = (item.space, item.name)
            if key in seen:
                continue
            seen.add(key)
            for ref in self._refs_of_line(item.ref):
                try:
                    response = self.http.delete(
                        self.resource_path(item.name, ref, item.space), params=self.query(ref)
                    )
                except httpx.HTTPError as exc:
                    self.cleanup_problems.append(f"delete {item.space}/{item.name}: {exc}")
                    break
                if response.status_code == 409 and error_code(response) == "operation_in_progress":
                    op_id = str(error_details(response).get("operationId", ""))
                    with contextlib.suppress(Exception):
                        self.wait(op_id, timeout=self.op_timeout)
                    response = self.http.delete(
                        self.resource_path(item.name, ref, item.space), params=self.query(ref)
                    )
                if response.status_code == 202:
                    with contextlib.suppress(Exception):
                        pending.append((item, str(response.json()["id"])))
                    break
        for item, op_id in pending:
            try:
                self.wait(op_id, timeout=self.op_timeout)
            except Exception as exc:
                self.cleanup_problems.append(f"delete {item.space}/{item.name}: {exc}")
        for space in reversed(self.spaces):
            try:
                response = self.http.delete(f"{API}/spaces/{_quote(space)}")
            except httpx.HTTPError as exc:
                self.cleanup_problems.append(f"delete space {space!r}: {exc}")
                continue
            if response.status_code not in (204, 200, 404, 400):
                self.cleanup_problems.append(f"delete space {space!r}: {describe(response)}")
        for client in (self.http, self.raw, self.admin_http):
            if client is not None:
                client.close()

    def _refs_of_line(self, ref: FormRef) -> list[FormRef]:
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
        return f"{API}/forms/{line.group}/{line.version}/{_quote(ref.kind)}/{what}"

    def resource_path(self, name: str, ref: FormRef | None = None, space: str | None = None) -> str:
        ref = ref or self.primary
        line = ref.line
        return (
            f"{API}/spaces/{_quote(space or self.space)}/forms/{line.group}/{line.version}/"
            f"{_quote(ref.kind)}/resources/{_quote(name)}"
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
        return self.http.get(f"{API}/operations/{_quote(op_id)}")

    # ---- expectations -----------------------------------------------------------------------

    @staticmethod
    def body(response: httpx.Response, what: str) -> dict[str, Any]:
        try:
            doc = response.json()
        except ValueError:
            raise fail(f"{what}: body is not JSON: {_clip(response.text)!r}") from None
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
            if record.get("state") != "running":
                return record
            if time.monotonic() > deadline:
                raise fail(f"operation {op_id} still running after {self.op_timeout:.0f}s")
            time.sleep(interval)
            interval = min(interval * 1.5, 0.25)

    def settle(self, response: httpx.Response, what: str) -> dict[str, Any]:
        """A 202 whose operation must succeed; its final record."""
        record = self.accepted(response, what)
        final = self.wait(record["id"])
        if final.get("state") != "succeeded":
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

    def _restore_faults(self) -> None:
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
