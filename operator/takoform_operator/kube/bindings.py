"""The TakoformBindings on the API server (binding_port.BindingPort), with a watch cache.

Reads answer from the cache the watch feeds (kube.binding_watch: complete before any CR is
reconciled) and from our own writes; every write goes to the API server with the
resourceVersion read, so a stale cache costs one refused write and a fresh GET, never a second
owner. `create` is the lock.

With hash sharding (kube.shards) a binding Bound to a CR carries its owner's slot label, and the
book lists and watches only the slots this replica watches, as its CRs: the bindings its CRs
hold, and every binding not Bound. Released and Lost ones carry no slot label, nor does the
write that lets one go before it is deleted, so that whoever may bind it next sees it change.
A binding outside those slots, met by a CR contending for it, is read by name at each of the
CR's looks, since no watch keeps it current here.

A binding Bound to a CR is written protected (core.binding.PROTECTION_FINALIZER, and the
operator's user as its guardian, which the admission policy beside the CRDs lets alone delete or
change it): letting it go is a write that drops the protection, then the delete.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import sys
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from typing import Any, Protocol, TypeAlias

import httpx

from takoform_operator.binding_port import BindingConflict, BindingError, BindingExists
from takoform_operator.core.binding import (
    BINDING_PLURAL,
    GUARDIAN_ANNOTATION,
    PROTECTION_FINALIZER,
    Binding,
    ClaimRef,
    Identity,
    InvalidBinding,
    Phase,
    binding_from_json,
)
from takoform_operator.core.depth import safe_loads
from takoform_operator.core.shard_ring import slot_label
from takoform_operator.core.state import Requested
from takoform_operator.core.tenancy import GROUP, VERSION
from takoform_operator.kube.freshness import older, resource_version
from takoform_operator.kube.json_seam import LIST_LIMIT
from takoform_spec.identity import FormLine, FormRef

_COLLECTION = f"/apis/{GROUP}/{VERSION}/{BINDING_PLURAL}"
_REVIEWS = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
#: A list of CRs as their metadata only (uids), however large their bodies.
_METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
logger = logging.getLogger(__name__)

#: A binding as the book keeps it: one flat tuple of strings (`_pack`), then its guard. The book
#: holds every binding of the cluster, however few CRs this process serves; as dataclasses each
#: would be six objects that every full collection of the garbage collector walks, while a tuple
#: of strings is no longer tracked once the collector has seen it (docs/performance.md).
_Record: TypeAlias = tuple[Any, ...]


class ListRefused(Exception):
    """The API server answered a page of a list with a status other than 200."""

    def __init__(self, answer: httpx.Response) -> None:
        self.status = answer.status_code
        super().__init__(f"{answer.status_code} {answer.text[:200]}")


#: Objects per page of every list the operator reads (kopf's of the CRs, the bindings', the
#: CRs' metadata behind the check for Lost owners): a page's objects are held until it is read,
#: and kopf starts a worker for each at once. At 500 Ready CRs a restart peaked about 10 MiB
#: higher than at 100 (docs/performance.md, "A list page of 100").
LIST_PAGE = 100


async def list_pages(
    client: httpx.AsyncClient,
    path: str,
    limit: int = LIST_PAGE,
    params: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """The pages of a chunked list of `path` (`limit` items each, Kubernetes' continue token),
    each decoded within LIST_LIMIT. Raises ListRefused, and what the client and the decoding
    raise."""
    query = {"limit": str(limit), **(params or {})}
    while True:
        answer = await client.get(path, params=query, headers=headers)
        if answer.status_code != 200:
            raise ListRefused(answer)
        page = safe_loads(answer.content, LIST_LIMIT)
        yield page
        query["continue"] = str((page.get("metadata") or {}).get("continue") or "")
        if not query["continue"]:
            return


class Contenders:
    """The CRs Blocked AlreadyManaged, indexed by the name of the binding they wait on: a
    change of one binding wakes its own contenders, not every contender of the cluster."""

    def __init__(self) -> None:
        self._by_name: dict[str, set[str]] = {}
        self._of: dict[str, str] = {}

    def hold(self, uid: str, name: str | None) -> None:
        """The CR's last look: contending for binding `name`, or (None) for nothing."""
        self.drop(uid)
        if name is not None:
            self._of[uid] = name
            self._by_name.setdefault(name, set()).add(uid)

    def drop(self, uid: str) -> None:
        name = self._of.pop(uid, None)
        if name is not None:
            waiting = self._by_name[name]
            waiting.discard(uid)
            if not waiting:
                del self._by_name[name]

    def of(self, names: Collection[str]) -> set[str]:
        return {uid for name in names for uid in self._by_name.get(name, ())}

    def __contains__(self, uid: object) -> bool:
        return uid in self._of


class Slots(Protocol):
    """Which bindings this process lists and watches (kube.shards with hash sharding)."""

    def label(self, claim: ClaimRef) -> str | None:
        """The slot label of a binding Bound to `claim`; None: bindings carry none."""
        ...

    def watches(self, body: Mapping[str, Any]) -> bool:
        """Whether the binding watch delivers the binding, as `body` is labelled."""
        ...

    def serves(self, claim: ClaimRef) -> bool:
        """Whether this replica acts on the CR `claim` names now (it corrects the label)."""
        ...

    def slot_selector(self) -> str:
        """The label selector of the bindings (and CRs) of the slots watched ("": all)."""
        ...


class EverySlot:
    """Sharding off: every binding is listed and watched, and none carries a slot label."""

    def label(self, claim: ClaimRef) -> str | None:
        return None

    def watches(self, body: Mapping[str, Any]) -> bool:
        return True

    def serves(self, claim: ClaimRef) -> bool:
        return False

    def slot_selector(self) -> str:
        return ""


class BindingBook:
    """The bindings this process knows, by name and by the CR uid that holds each."""

    def __init__(
        self,
        client: Callable[[], httpx.AsyncClient],
        guardian: str = "",
        slots: Slots | None = None,
    ) -> None:
        self._client = client
        self.slots: Slots = slots or EverySlot()
        #: Bindings held that the watch does not deliver (another slot's, read for a CR that
        #: contends for one): read again at each look (`get`).
        self._fetched: set[str] = set()
        #: Bound bindings whose slot label is not their owner's (written before hash sharding
        #: was on): their owner writes them again (`at_start`).
        self._mislabelled: set[str] = set()
        #: The user this process authenticates as (`introduce`): the guardian it writes.
        self.guardian = guardian
        self._by_name: dict[str, _Record] = {}
        #: owner CR uid -> the name of the binding Bound to it (a CR holds at most one).
        self._held: dict[str, str] = {}
        #: binding name -> the newest resourceVersion seen (a late watch event is dropped).
        self._versions: dict[str, str] = {}
        #: Set once every binding of the cluster was listed into the book.
        self.listed = asyncio.Event()
        #: The CRs (by uid) a binding named, before or after somebody else changed or deleted
        #: it: each is woken to look at its own binding (`woken`).
        self._touched: set[str] = set()
        #: The names of the bindings that changed (`woken`): their contenders look again.
        self._changed: set[str] = set()

    # -- the watch ---------------------------------------------------------------------------

    def observe(self, body: Mapping[str, Any], *, ours: bool = False) -> bool:
        """A binding as the watch delivered it (`ours`: as our own write's answer); True when
        it changed what the cache held."""
        name = str((body.get("metadata") or {}).get("name") or "")
        version = resource_version(body)
        known = self._versions.get(name, "")
        if older(version, known) or (version and version == known):
            return False  # late, or what the book holds already (the echo of our own write)
        try:
            binding = binding_from_json(body)
        except InvalidBinding:
            binding = None
        if binding is not None and binding.name != name:
            binding = None  # a hand-made object under another name binds nothing
        if binding is not None and binding.resource_version == version:
            version = binding.resource_version  # one copy, held by the record and here
        self._versions[name] = version
        before = self._store(name, binding, _guard_of(body))
        if not self.slots.watches(body):
            self._fetched.add(name)
        if binding is not None and slot_label(body) != self._slot(binding):
            self._mislabelled.add(name)
        if before == self._by_name.get(name):
            return False
        if not ours:
            self._touch(before, binding)
        return True

    def forget(self, body: Mapping[str, Any]) -> bool:
        """The watch saw it deleted; True when the cache held it. Its version stays as a
        tombstone: an older event of it, delivered late, brings no phantom back (a listing
        forgets the tombstones, `retain`)."""
        name = str((body.get("metadata") or {}).get("name") or "")
        version = resource_version(body)
        if older(version, self._versions.get(name, "")):
            return False
        self._versions[name] = version
        before = self._store(name, None)
        self._touch(before, None)
        return before is not None

    async def left(self, body: Mapping[str, Any]) -> bool:
        """A DELETED event of a binding that carries a slot label, from a watch with a label
        selector: the API server sends one too when a binding only left the watch (Bound to a
        CR of another slot now), with its content from before. Read by name: gone, it is
        forgotten (`forget`); there, the book holds it as it is now, or, another slot's, drops
        it without a tombstone (`went`): its new owner's replica watches it. True when the book
        changed. Raises httpx.HTTPError, and ValueError when the API server refused the read."""
        name = str((body.get("metadata") or {}).get("name") or "")
        answer = await self._client().get(f"{_COLLECTION}/{name}")
        if answer.status_code == 404:
            return self.forget(body)
        if answer.status_code != 200:
            raise ValueError(_refused("read", name, answer))
        latest = answer.json()
        if self.slots.watches(latest):
            return self.observe(latest)
        self._versions.pop(name, None)
        before = self._store(name, None)
        self._touch(before, None)
        return before is not None

    def woken(self) -> tuple[set[str], set[str]]:
        """Since the last call: the CRs whose binding somebody else changed or deleted, and
        the names of every binding that changed."""
        touched, self._touched = self._touched, set()
        names, self._changed = self._changed, set()
        return touched, names

    def _touch(self, before: _Record | None, after: Binding | None) -> None:
        for binding in (None if before is None else _unpack(before), after):
            if binding is not None:
                self._changed.add(binding.name)
                if binding.claim is not None and binding.claim.uid:
                    self._touched.add(binding.claim.uid)

    def retain(self, names: Collection[str], version: str) -> bool:
        """A complete listing at `version` named only `names`: forget the others, unless the
        book saw them at a later version (written after the listing was read). True when the
        book changed."""
        gone = [
            name
            for name, seen in self._versions.items()
            if name not in names and not older(version, seen)
        ]
        changed = False
        for name in gone:
            self._versions.pop(name, None)
            before = self._store(name, None)
            self._touch(before, None)
            changed = changed or before is not None
        return changed

    # -- BindingPort ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._by_name)

    async def get(self, identity: Identity) -> Binding | None:
        name = identity.binding_name()
        if name in self._fetched:
            await self.refresh(name)  # no watch keeps it current here
        return self._read(name)

    async def read(self, identity: Identity) -> Binding | None:
        name = identity.binding_name()
        await self.refresh(name)
        return self._read(name)

    def went(self, identity: Identity) -> bool:
        name = identity.binding_name()
        return name in self._versions and name not in self._by_name

    def held_by(self, cr_uid: str) -> Binding | None:
        binding = self._read(self._held.get(cr_uid, ""))
        return binding if binding is not None and binding.owned_by(cr_uid) else None

    async def create(self, binding: Binding) -> Binding:
        document = binding.to_json(guardian=self.guardian, slot=self._slot(binding))
        answer = await self._send("POST", _COLLECTION, document)
        if answer.status_code == 409:
            await self.refresh(binding.name)
            raise BindingExists(f"TakoformBinding {binding.name} exists")
        return self._written(answer, binding)

    async def replace(self, binding: Binding) -> Binding:
        document = binding.to_json(guardian=self.guardian, slot=self._slot(binding))
        return await self._replace(binding, document)

    async def _replace(self, binding: Binding, document: dict[str, Any]) -> Binding:
        answer = await self._send("PUT", f"{_COLLECTION}/{binding.name}", document)
        if answer.status_code in (404, 409):
            await self.refresh(binding.name)
            raise BindingConflict(f"TakoformBinding {binding.name} changed meanwhile")
        return self._written(answer, binding)

    async def delete(self, binding: Binding) -> None:
        if self._guard(binding.name) is not None:
            # Protected: the write that lets it go first (a delete would only mark it). It
            # carries no slot label either: every replica sees the binding go, and wakes the
            # CRs that contend for it.
            binding = await self._replace(binding, binding.to_json())
        preconditions = {"preconditions": {"resourceVersion": binding.resource_version}}
        answer = await self._send("DELETE", f"{_COLLECTION}/{binding.name}", preconditions)
        if answer.status_code == 409:
            await self.refresh(binding.name)
            raise BindingConflict(f"TakoformBinding {binding.name} changed meanwhile")
        if answer.status_code not in (200, 202, 404):
            raise BindingError(_refused("delete", binding.name, answer))
        self._store(binding.name, None)

    async def claim_exists(self, identity: Identity, claim: ClaimRef) -> bool:
        line = identity.line
        path = f"/apis/{line.api_version}/namespaces/{claim.namespace}/{line.plural}/{claim.name}"
        try:
            answer = await self._client().get(path)
        except httpx.HTTPError:
            return True
        if answer.status_code == 404:
            return False
        if answer.status_code != 200:
            return True  # forbidden or API trouble: not proven gone
        uid = str((answer.json().get("metadata") or {}).get("uid") or "")
        return not claim.uid or uid == claim.uid

    async def recorded_elsewhere(
        self, identity: Identity, cr_uid: str, creator: str | None
    ) -> bool:
        line = identity.line
        found = await self._list_crs(line, _recording(identity))
        if found is None:
            return True
        if any(uid != cr_uid and _records(status, identity) for uid, status in found):
            return True
        if creator is None or creator == cr_uid:
            return False
        everyone = await self._list_crs(line, None)
        return everyone is None or any(uid == creator for uid, _ in everyone)

    async def _list_crs(
        self, line: FormLine, fields: str | None, labels: str = ""
    ) -> list[tuple[str, Any]] | None:
        """(uid, status) of every CR of `line` in every namespace, the field selector `fields`
        applied (a CRD of an earlier release selects on no status field: then filtered by the
        caller), page by page; None: their metadata only (uid, None). With `labels`, only those
        the label selector matches. None when the API server cannot tell."""
        path = f"/apis/{line.api_version}/{line.plural}"
        headers = {"Accept": _METADATA_ONLY} if fields is None else {}
        while True:
            selector = {"fieldSelector": fields} if fields else {}
            if labels:
                selector["labelSelector"] = labels
            try:
                return [
                    (
                        str((item.get("metadata") or {}).get("uid") or ""),
                        item.get("status") if isinstance(item, dict) else None,
                    )
                    async for page in list_pages(
                        self._client(), path, params=selector, headers=headers
                    )
                    for item in page.get("items") or ()
                ]
            except ListRefused as exc:
                if exc.status != 400 or not fields:
                    return None
                fields = None  # the CRD has no such selectable field: the caller filters
            except (httpx.HTTPError, ValueError):
                return None

    async def refresh(self, name: str) -> None:
        """Read one binding again after a refused write (the cache was behind)."""
        try:
            answer = await self._client().get(f"{_COLLECTION}/{name}")
        except httpx.HTTPError as exc:
            raise BindingError(f"TakoformBinding {name} could not be read: {exc}") from exc
        if answer.status_code == 404:
            self._store(name, None)  # its last version stays: no older event brings it back
        elif answer.status_code == 200:
            self.observe(answer.json())
        else:
            raise BindingError(_refused("read", name, answer))

    def _read(self, name: str) -> Binding | None:
        record = self._by_name.get(name)
        return None if record is None else _unpack(record)

    def _guard(self, name: str) -> _Guard:
        record = self._by_name.get(name)
        return None if record is None else record[-1]

    # -- protection ----------------------------------------------------------------------------

    async def introduce(self) -> None:
        """Learn the user this process authenticates as (a SelfSubjectReview): the guardian of
        the bindings it writes. Unknown (an API server without the review): the bindings carry
        the finalizer only, and the admission policy does not match them."""
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        try:
            answer = await self._client().post(_REVIEWS, json=review)
            user = answer.json().get("status", {}).get("userInfo", {}) if answer.is_success else {}
        except (httpx.HTTPError, ValueError, AttributeError):
            user = {}
        self.guardian = str(user.get("username") or "") if isinstance(user, dict) else ""
        if not self.guardian:
            logger.warning(
                "could not learn this process's user name (SelfSubjectReview); TakoformBindings "
                "are written with the protection finalizer only, and admission does not guard them"
            )

    def unguarded(self) -> list[Binding]:
        """Protected bindings written without the protection (by a release before it), and
        those of the CRs this replica serves written without their slot label (before hash
        sharding was on): each is written again by `guard`."""
        found = []
        for name, record in self._by_name.items():
            if record[-1] is not None and name not in self._mislabelled:
                continue  # most of them: not unpacked
            binding = _unpack(record)
            if (record[-1] is None and binding.protected) or (
                name in self._mislabelled
                and binding.claim is not None
                and self.slots.serves(binding.claim)
            ):
                found.append(binding)
        return found

    async def guard(self, binding: Binding) -> None:
        """Write `binding` again with its protection and slot label; one changed meanwhile is
        left to its owner's next look (every write of it carries both)."""
        with contextlib.suppress(BindingConflict):
            await self.replace(binding)

    async def at_start(self) -> None:
        """Once the book is listed, what no watch event will ever say: the bindings an earlier
        release wrote unprotected, or without their slot label, are written again (an upgrade
        costs one write per Bound binding, once), and those whose owner went while no operator
        ran are found Lost."""
        await self.listed.wait()
        for binding in self.unguarded():
            try:
                await self.guard(binding)
            except BindingError as exc:
                logger.warning("TakoformBinding %s not written again: %s", binding.name, exc)
        await self.find_lost()

    async def find_lost(self) -> None:
        """Every binding Bound to a CR that no longer exists is written Lost, conditioned on
        the resourceVersion listed, so exactly one process does (a binding that changed since
        is its owner's). One list of each Form line's CRs (metadata only), taken after the
        bindings were, then a GET of each CR missing from it: only a CR proven gone is gone.
        The book may hold every binding of the cluster: each is unpacked only once its CR is
        missing. With hash sharding each replica checks those of the slots it watches, against
        a list of the CRs of those slots (a CR labelled otherwise is read by name); of the
        bindings without a slot label, which every replica holds, those of the CRs it serves."""
        slots = self.slots.slot_selector()
        names_of: dict[tuple[str, str], list[str]] = {}
        for name in list(self._held.values()):
            record = self._by_name[name]
            if slots and name in self._mislabelled:
                claim = _unpack_claim(record[6:10])
                if claim is None or not self.slots.serves(claim):
                    continue  # another replica's to check
            names_of.setdefault((record[1], record[2]), []).append(name)
        for (api_version, kind), names in names_of.items():
            listed = await self._list_crs(_form_line(api_version, kind), None, slots)
            if listed is None:
                continue
            alive = {uid for uid, _ in listed}
            del listed
            for name in names:
                now = self._by_name.get(name)
                if now is None or not now[_CLAIM_UID] or now[_CLAIM_UID] in alive:
                    continue  # its owner is there, or it changed since: its owner's now
                binding = _unpack(now)
                claim = binding.claim
                if binding.phase is not Phase.BOUND or claim is None:
                    continue
                if await self.claim_exists(binding.identity, claim):
                    continue
                logger.info("TakoformBinding %s: its owner %s/%s is gone, Lost", binding.name,
                            claim.namespace, claim.name)  # fmt: skip
                with contextlib.suppress(BindingError):
                    await self.replace(binding.lost(None))

    def _store(self, name: str, binding: Binding | None, guard: _Guard = None) -> _Record | None:
        """Hold `binding` under `name` (None: drop it) with the protection it carries on the
        API server; returns the record held before."""
        before = self._by_name.pop(name, None)
        self._fetched.discard(name)
        self._mislabelled.discard(name)
        claim = None if before is None else _unpack(before).claim
        if claim is not None and self._held.get(claim.uid) == name:
            del self._held[claim.uid]
        if binding is not None:
            record = self._by_name[name] = (*_pack(binding), guard)
            if binding.phase is Phase.BOUND and binding.claim is not None and binding.claim.uid:
                self._held[record[_CLAIM_UID]] = name
        return before

    def _slot(self, binding: Binding) -> str | None:
        """The slot label `binding` is written with (None: none)."""
        claim = binding.claim
        if binding.phase is not Phase.BOUND or claim is None:
            return None
        return self.slots.label(claim)

    async def _send(self, method: str, path: str, body: dict[str, Any]) -> httpx.Response:
        try:
            return await self._client().request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise BindingError(f"TakoformBinding write did not land: {exc}") from exc

    def _written(self, answer: httpx.Response, binding: Binding) -> Binding:
        if answer.status_code not in (200, 201):
            raise BindingError(_refused("write", binding.name, answer))
        # Its watch echo, the same resourceVersion, is then passed over (`observe`).
        self.observe(answer.json(), ours=True)
        return self._read(binding.name) or binding


#: A binding's protection as the API server holds it: the guardian it names ("": the
#: finalizer without one), or None when it carries no protection finalizer.
_Guard: TypeAlias = str | None


def _guard_of(body: Mapping[str, Any]) -> _Guard:
    metadata = body.get("metadata") or {}
    if PROTECTION_FINALIZER not in (metadata.get("finalizers") or ()):
        return None
    return str((metadata.get("annotations") or {}).get(GUARDIAN_ANNOTATION) or "")


def _pack(binding: Binding) -> _Record:
    """A binding as one flat tuple of strings (and None where a part is absent): one object,
    where a tuple per part was six. The strings a cluster has few of (spaces, Form lines,
    hosts, namespaces, refs, pins) are interned, shared by every record that names them rather
    than one copy each, as every decode of a binding makes them."""
    identity, ref, requested = binding.identity, binding.form_ref, binding.requested
    name = identity.name
    pin = None if requested is None else requested.pin
    return (
        _shared(identity.space),
        _shared(identity.line.api_version),
        _shared(identity.line.kind),
        name,
        _shared(identity.host),
        binding.phase.value,
        *_pack_claim(binding.claim, name),
        *(_ABSENT if ref is None else map(_shared, _ref_fields(ref))),
        *(
            _ABSENT
            if requested is None
            else (
                _shared(requested.space),
                _same(requested.name, name),
                requested.import_id,
                _shared(requested.host_ref),
            )
        ),
        *((None, None) if pin is None else map(_shared, pin)),
        binding.uid,
        *_pack_claim(binding.last_owner, name),
        binding.resource_version,
    )


#: Where a record holds its claim's uid (`_pack`).
_CLAIM_UID = 8
#: A part a binding does not have (its claim, ref or request): four fields, each None.
_ABSENT = (None, None, None, None)


def _same(text: str, held: str) -> str:
    """`text`, as the string object already `held` when they are equal (a CR is mostly named
    as its resource: one copy, not three)."""
    return held if text == held else text


def _shared(text: str | None) -> str | None:
    return None if text is None else sys.intern(text)


def _ref_fields(ref: FormRef) -> tuple[str, str, str, str]:
    return ref.api_version, ref.kind, ref.definition_version, ref.schema_digest


def _unpack(record: _Record) -> Binding:
    space, api_version, kind, name, host, phase = record[:6]
    claim, ref, requested, pin = record[6:10], record[10:14], record[14:18], record[18:20]
    uid, last_owner, resource_version = record[20], record[21:25], record[25]
    return Binding(
        identity=Identity(space, _form_line(api_version, kind), name, host),
        phase=_PHASES[phase],
        claim=_unpack_claim(claim),
        form_ref=None if ref[0] is None else _form_ref(*ref),
        requested=None
        if requested[0] is None
        else Requested(
            requested[0],
            requested[1],
            None if pin[0] is None else (pin[0], pin[1]),
            requested[2],
            requested[3],
        ),
        uid=uid,
        last_owner=_unpack_claim(last_owner),
        resource_version=resource_version,
    )


def _pack_claim(claim: ClaimRef | None, name: str) -> tuple[str | None, ...]:
    if claim is None:
        return _ABSENT
    namespace, namespace_uid = sys.intern(claim.namespace), sys.intern(claim.namespace_uid)
    # Its CR's uid as the CR's own indexes hold it (kube.loops), one copy for all.
    return (namespace, _same(claim.name, name), sys.intern(claim.uid), namespace_uid)


def _unpack_claim(packed: tuple[Any, ...]) -> ClaimRef | None:
    return None if packed[0] is None else ClaimRef(*packed)


_PHASES = {phase.value: phase for phase in Phase}
# A cluster has a few Form lines and exact refs: the bindings' share one object each.
_form_line = functools.lru_cache(maxsize=256)(FormLine)
_form_ref = functools.lru_cache(maxsize=256)(FormRef)


def _refused(verb: str, name: str, answer: httpx.Response) -> str:
    return (
        f"TakoformBinding {name}: the API server refused the {verb}: {answer.status_code} "
        + (answer.text[:300])
    )


def _recording(identity: Identity) -> str:
    """The field selector of the CRs whose status names the identity's space and name."""
    escaped = [re.sub(r"([\\,=])", r"\\\1", v) for v in (identity.space, identity.name)]
    return f"status.space={escaped[0]},status.name={escaped[1]}"


def _records(status: Any, identity: Identity) -> bool:
    """The status records `identity` (a host it does not name: the default, any host)."""
    if not isinstance(status, dict):
        return False
    ref = status.get("formRef")
    kind = ref.get("kind") if isinstance(ref, dict) else None
    host = status.get("host")
    return (
        status.get("space") == identity.space
        and status.get("name") == identity.name
        and kind in (None, identity.line.kind)
        and host in (None, identity.host)
    )
