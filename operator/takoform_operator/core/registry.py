"""The registry (decision 0017 rule 2): two maps, immutable snapshots.

- `supported`: keyed by the WHOLE FormRef {apiVersion, kind, definitionVersion, schemaDigest};
  every identity this build can read, observe, update and delete.
- `default_creates`: keyed by the Form line {apiVersion, kind}; the one identity a NEW resource
  of that line is created under.

Production and tests use this one type; a test registers a synthetic definition the same way the
generated data is loaded. The package digest lives in the value as audit evidence, never in a key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from takoform_spec.definitions import FormDefinition, check_compatibility
from takoform_spec.errors import CatalogError
from takoform_spec.identity import FormLine, FormRef

from .codecs import Codec, build_codecs
from .errors import UnknownFormRef


@dataclass(frozen=True)
class SupportedForm:
    """What the build holds for one exact FormRef."""

    ref: FormRef
    codec: Codec
    definition: FormDefinition
    #: Audit evidence only: which package this build's definition came from.
    package_digest: str


class Registry:
    """An immutable registry snapshot. `register` and `with_default_create` return copies."""

    __slots__ = ("_default_creates", "_supported")

    def __init__(
        self,
        supported: Mapping[FormRef, SupportedForm] | None = None,
        default_creates: Mapping[FormLine, FormRef] | None = None,
    ) -> None:
        supported = dict(supported or {})
        default_creates = dict(default_creates or {})
        for line, ref in default_creates.items():
            if ref.line != line:
                raise CatalogError(f"default create for {line} names a ref of {ref.line}")
            if ref not in supported:
                raise CatalogError(f"default create for {line} names unsupported ref {ref}")
        self._supported: Mapping[FormRef, SupportedForm] = MappingProxyType(supported)
        self._default_creates: Mapping[FormLine, FormRef] = MappingProxyType(default_creates)

    @classmethod
    def from_definitions(
        cls, definitions: Iterable[FormDefinition], default_creates: Mapping[FormLine, str]
    ) -> Registry:
        """Build a snapshot from definitions; `default_creates` maps a line to a version."""
        definitions = list(definitions)
        check_compatibility(definitions)
        codecs = build_codecs(definitions)
        supported = {
            d.ref: SupportedForm(d.ref, codecs[d.ref], d, d.package_digest) for d in definitions
        }
        defaults: dict[FormLine, FormRef] = {}
        for line, version in default_creates.items():
            matches = [ref for ref in supported if ref.line == line]
            chosen = [ref for ref in matches if ref.definition_version == version]
            if not chosen:
                raise CatalogError(f"default create {line} {version} is not in the catalog")
            defaults[line] = chosen[0]
        return cls(supported, defaults)

    # -- the two maps -------------------------------------------------------------------------

    @property
    def supported(self) -> Mapping[FormRef, SupportedForm]:
        return self._supported

    @property
    def default_creates(self) -> Mapping[FormLine, FormRef]:
        return self._default_creates

    # -- copies -------------------------------------------------------------------------------

    def register(self, definition: FormDefinition, *, default_create: bool = False) -> Registry:
        """A copy that also supports `definition` (sharing a codec when additive)."""
        same_line = [
            f.definition for f in self._supported.values() if f.ref.line == definition.line
        ]
        others = [d for d in same_line if d.ref != definition.ref]
        line_defs = [*others, definition]
        check_compatibility(line_defs)
        codecs = build_codecs(line_defs)
        supported = {
            ref: form for ref, form in self._supported.items() if ref.line != definition.line
        }
        for d in line_defs:
            supported[d.ref] = SupportedForm(d.ref, codecs[d.ref], d, d.package_digest)
        defaults = dict(self._default_creates)
        if default_create:
            defaults[definition.line] = definition.ref
        return Registry(supported, defaults)

    def with_default_create(self, ref: FormRef) -> Registry:
        """A copy whose line `ref.line` creates new resources under `ref` (must be supported)."""
        self.lookup(ref)
        return Registry(self._supported, {**self._default_creates, ref.line: ref})

    # -- questions ----------------------------------------------------------------------------

    def lookup(self, ref: FormRef) -> SupportedForm:
        """The supported form of the exact `ref`, or fail closed (0017 rule 4)."""
        form = self._supported.get(ref)
        if form is None:
            raise UnknownFormRef(ref, self.known_refs(ref.line))
        return form

    def codec_for(self, ref: FormRef) -> Codec:
        return self.lookup(ref).codec

    def is_supported(self, ref: FormRef) -> bool:
        return ref in self._supported

    def known_refs(self, line: FormLine) -> list[FormRef]:
        return sorted(ref for ref in self._supported if ref.line == line)

    def default_create_ref(self, line: FormLine) -> FormRef | None:
        return self._default_creates.get(line)

    def lines(self) -> list[FormLine]:
        return sorted({ref.line for ref in self._supported})

    def __repr__(self) -> str:
        return f"<Registry {len(self._supported)} supported, {len(self._default_creates)} lines>"
