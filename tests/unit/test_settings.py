"""`takoform-operator run` refuses settings that cannot work with one line naming them and exit
status 2, before it connects anywhere; settings it does not need are not asked for."""

from __future__ import annotations

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
