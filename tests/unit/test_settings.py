"""`takoform-operator run` refuses settings that cannot work with one line naming them and exit
status 2, before it connects anywhere; settings it does not need are not asked for."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from takoform_operator import cli


def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], **env: str) -> str:
    """`takoform-operator run` with exactly these TAKOFORM_* settings; returns its stderr. The run
    must stop at the settings (exit 2): nothing here has a cluster to connect to."""
    for name in ("TAKOFORM_HOST_TOKEN", "TAKOFORM_HOST_TOKEN_FILE", "KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(f"TAKOFORM_{name}", value)
    assert cli.main(["run"]) == 2
    stderr = capsys.readouterr().err
    assert stderr.count("\n") == 1 and stderr.startswith("error: "), stderr
    assert "Traceback" not in stderr
    return stderr


@pytest.mark.parametrize(
    ("env", "names"),
    [
        (
            {
                "LEADER_ELECTION": "true",
                "LEASE_SECONDS": "10",
                "LEASE_RENEW_DEADLINE_SECONDS": "15",
            },
            ["TAKOFORM_LEASE_RENEW_DEADLINE_SECONDS", "TAKOFORM_LEASE_SECONDS"],
        ),
        (
            {
                "LEADER_ELECTION": "true",
                "LEASE_RENEW_DEADLINE_SECONDS": "2",
                "LEASE_RETRY_SECONDS": "2",
            },
            ["TAKOFORM_LEASE_RETRY_SECONDS", "TAKOFORM_LEASE_RENEW_DEADLINE_SECONDS"],
        ),
        (
            {"SHARDING": "hash", "LEASE_SECONDS": "10", "LEASE_RENEW_DEADLINE_SECONDS": "10"},
            ["TAKOFORM_LEASE_RENEW_DEADLINE_SECONDS", "TAKOFORM_LEASE_SECONDS"],
        ),
        (
            {"SHARDING": "hash", "LEADER_ELECTION": "true"},
            ["TAKOFORM_SHARDING=hash", "TAKOFORM_LEADER_ELECTION=true"],
        ),
        ({"SHARDING": "consistent"}, ["TAKOFORM_SHARDING"]),
        ({"SHARDING": "hash", "SHARD_KEY": "uid"}, ["TAKOFORM_SHARD_KEY"]),
        ({"METRICS_PORT": "8081", "HEALTH_PORT": "8081"}, ["METRICS_PORT", "HEALTH_PORT"]),
        ({"METRICS_PORT": "70000"}, ["TAKOFORM_METRICS_PORT"]),
        ({"BACKOFF_BASE_SECONDS": "10", "BACKOFF_CAP_SECONDS": "1"}, ["BACKOFF_CAP_SECONDS"]),
        ({"POLL_READY_SECONDS": "soon"}, ["TAKOFORM_POLL_READY_SECONDS"]),
        ({"LOG_FORMAT": "xml"}, ["TAKOFORM_LOG_FORMAT"]),
    ],
)
def test_settings_that_cannot_work_end_the_run_with_one_line_naming_them(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
    names: list[str],
) -> None:
    stderr = run(monkeypatch, capsys, HOST_TOKEN="t", **env)
    assert stderr.startswith("error: invalid settings: ")
    for name in names:
        assert name in stderr


def test_lease_settings_are_not_checked_without_leader_election(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Stops at the next check instead (no token): the lease values were not held against it.
    stderr = run(monkeypatch, capsys, LEASE_SECONDS="10", LEASE_RENEW_DEADLINE_SECONDS="15")
    assert "no host token" in stderr


def test_the_implicit_host_needs_a_token_and_says_how_to_do_without_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stderr = run(monkeypatch, capsys)
    assert "no host token" in stderr and "TAKOFORM_IMPLICIT_HOST=false" in stderr


@pytest.mark.parametrize(
    ("content", "reason"), [(None, "No such file"), (b"\xff\xfe token", "not UTF-8")]
)
def test_an_unreadable_token_file_is_named_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    content: bytes | None,
    reason: str,
) -> None:
    token_file = tmp_path / "token"
    if content is not None:
        token_file.write_bytes(content)
    stderr = run(monkeypatch, capsys, HOST_TOKEN_FILE=str(token_file))
    assert "TAKOFORM_HOST_TOKEN_FILE" in stderr and reason in stderr
    assert "token" in stderr and "\\xff" not in stderr


def test_a_missing_tls_file_of_the_implicit_host_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    stderr = run(monkeypatch, capsys, HOST_TOKEN="t", HOST_CA_BUNDLE=str(tmp_path / "ca.pem"))
    assert "TAKOFORM_HOST_CA_BUNDLE" in stderr and "ca.pem" in stderr


def test_every_setting_has_a_row_in_docs_operator_md_with_its_default() -> None:
    """The settings table of docs/operator.md names every setting once, and a setting with a
    plain default shows exactly it (one without says what it falls back to)."""
    import re

    from takoform_operator.settings import Settings

    doc = (Path(__file__).resolve().parents[2] / "docs" / "operator.md").read_text()
    rows = re.findall(r"^\| `(TAKOFORM_[A-Z_]+)` \| ([^|]*) \|", doc, re.M)
    table = dict(rows)
    assert len(table) == len(rows), "a setting has two rows"
    fields = Settings.model_fields
    assert sorted(table) == sorted(f"TAKOFORM_{name.upper()}" for name in fields)
    for name, field in fields.items():
        default = field.default
        if default is None:
            continue
        shown = str(default).lower() if isinstance(default, bool) else str(default)
        assert table[f"TAKOFORM_{name.upper()}"] == f"`{shown}`", name


def test_one_host_holds_three_quarters_of_the_slots_unless_told_otherwise() -> None:
    from takoform_operator.settings import Settings

    def slots(**values: object) -> int:
        return Settings(host_token="t", **values).host_slots()  # type: ignore[arg-type]

    assert slots() == 12
    assert slots(max_concurrent_reconciles=2) == 1
    assert slots(max_concurrent_reconciles=1) == 1
    assert slots(max_reconciles_per_host=4) == 4
    assert slots(max_reconciles_per_host=40) == 16, "never more than there are"


def test_run_help_and_the_settings_table_name_every_setting_the_model_has(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`takoform-operator run --help` is generated from the settings model; the table of
    docs/operator.md is written by hand, and must name the same variables, no more."""
    from takoform_operator.cli import main
    from takoform_operator.settings import Settings

    variables = {f"TAKOFORM_{name.upper()}" for name in Settings.model_fields}
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    helped = set(re.findall(r"^  (TAKOFORM_[A-Z0-9_]+) \(default: ", capsys.readouterr().out, re.M))
    assert helped == variables
    docs = (Path(__file__).resolve().parents[2] / "docs" / "operator.md").read_text()
    section = docs.split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    tabled = set(re.findall(r"^\| `(TAKOFORM_[A-Z0-9_]+)` \|", section, re.M))
    assert tabled == variables, (sorted(variables - tabled), sorted(tabled - variables))
