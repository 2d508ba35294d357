"""The suite itself, without a host: every MUST is cited, names are stable, the CLI's usage."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from processes import free_port

from takoform_conformance import CHECKS, cited_rules
from takoform_conformance.forms import FormModel
from takoform_spec.catalog import load_catalog

from .switches import REQUIRED_NAMES, SWITCH_TO_CHECK

ROOT = Path(__file__).resolve().parents[2]
HOST_API = ROOT / "docs" / "host-api.md"
CONFORMANCE_DOC = ROOT / "docs" / "conformance.md"


def _rules_in_host_api() -> set[int]:
    return {int(n) for n in re.findall(r"\*\*H-(\d+)\*\*", HOST_API.read_text(encoding="utf-8"))}


def test_every_numbered_must_is_cited_by_a_check() -> None:
    rules = _rules_in_host_api()
    assert rules, "docs/host-api.md numbers no rule"
    assert rules == set(range(1, max(rules) + 1)), "H-numbers are not contiguous"
    uncited = sorted(rules - cited_rules())
    assert not uncited, f"no check cites H-{uncited}"
    unknown = sorted(cited_rules() - rules)
    assert not unknown, f"checks cite rules docs/host-api.md does not have: H-{unknown}"


def test_required_check_names_exist() -> None:
    names = [c.name for c in CHECKS]
    assert len(names) == len(set(names)), "check names must be unique"
    assert set(REQUIRED_NAMES) <= set(names)
    for name in names:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name), name


def test_each_switch_names_a_check_citing_the_rules_it_breaks() -> None:
    by_name = {c.name: c for c in CHECKS}
    for switch, (check, rules) in SWITCH_TO_CHECK.items():
        assert check in by_name, switch
        assert set(rules) <= set(by_name[check].cites), (switch, check, rules)


def test_cites_and_admin_flags_are_well_formed() -> None:
    for item in CHECKS:
        assert item.cites, item.name
        for cite in item.cites:
            assert re.fullmatch(r"H-\d+|§\d+", cite), (item.name, cite)
        assert item.admin in ("no", "optional", "required"), item.name
        assert item.summary, f"{item.name} needs a docstring"


def test_docs_table_lists_every_check_with_its_citations() -> None:
    text = CONFORMANCE_DOC.read_text(encoding="utf-8").split("## The checks", 1)[1]
    text = text.split("\n## ", 1)[0]
    rows = {
        m[1]: m[2]
        for m in re.finditer(r"^\| `([a-z0-9-]+)` \| ([^|]+) \|", text, flags=re.MULTILINE)
    }
    for item in CHECKS:
        assert item.name in rows, f"docs/conformance.md has no row for {item.name}"
        assert [c.strip() for c in rows[item.name].split(",")] == list(item.cites), item.name
    assert set(rows) == {c.name for c in CHECKS}


@pytest.mark.parametrize("version", ["1.0.0", "1.1.0", "2.0.0"])
def test_spec_builder_agrees_with_the_core_codec(version: str) -> None:
    """Specs the suite builds are valid / invalid exactly as the definition says."""
    from takoform_operator.core.codecs import build_codecs
    from takoform_operator.core.errors import CodecError

    catalog = load_catalog()
    definition = next(
        d
        for d in catalog.definitions
        if d.ref.kind == "Bucket" and d.ref.definition_version == version
    )
    codec = build_codecs(catalog.definitions)[definition.ref]
    model = FormModel(definition.ref, dict(definition.schema))
    valid = model.valid_spec()
    codec.encode(definition.ref, valid)
    codec.encode(definition.ref, model.changed(valid))
    siblings = {f.name for d in catalog.definitions if d.ref.kind == "Bucket" for f in d.fields}
    cases = model.invalid_specs(siblings)
    assert len(cases) >= 5
    for what, spec, _field in cases:
        with pytest.raises(CodecError):
            codec.encode(definition.ref, spec)
            pytest.fail(f"the codec accepts {what}: {spec}")


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "takoform_conformance.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def test_cli_list() -> None:
    result = _cli("--list")
    assert result.returncode == 0, result.stderr
    for item in CHECKS:
        assert item.name in result.stdout


def test_cli_usage_errors_exit_2_without_traceback() -> None:
    missing_host = _cli("--token", "t")
    assert missing_host.returncode == 2
    assert "--host is required" in missing_host.stderr
    unknown = _cli("--host", "http://127.0.0.1:9", "--token", "t", "--only", "no-such-check")
    assert unknown.returncode == 2
    assert "unknown check name(s): no-such-check" in unknown.stderr


def test_cli_unreachable_host_exits_2_with_a_clear_message() -> None:
    port = free_port()  # a port nobody listens on
    result = _cli("--host", f"http://127.0.0.1:{port}", "--token", "t", "--json")
    assert result.returncode == 2
    assert f"cannot reach the host at http://127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
