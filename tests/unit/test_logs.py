"""Log lines (takoform_operator.logs), the version (`--version`, takoform_build_info).

kopf's per-object records are made by kopf's own ObjectLogger, as when the operator runs: the
formatter is held to what kopf really puts on a record, not to a hand-made one."""

from __future__ import annotations

import json
import logging
import platform
from collections.abc import Iterator
from importlib.metadata import version

import kopf
import pytest
from kopf._core.actions.loggers import ObjectLogger
from prometheus_client import CollectorRegistry, generate_latest

from takoform_operator.cli import main as cli_main
from takoform_operator.kube.crs import log_fields
from takoform_operator.logs import JsonFormatter, TextFormatter, look
from takoform_operator.metrics import Metrics

UID = "0c5e1d0e-7a51-4c6e-9d3b-2f1f5c9b8a11"
BODY = {
    "apiVersion": "storage.takoform.io/v1",
    "kind": "Bucket",
    "metadata": {"namespace": "team-a", "name": "logs", "uid": UID},
    "spec": {"hostRef": "eu-1"},
}


class _Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def kept() -> Iterator[_Keep]:
    """Records of kopf's per-object logger and of the operator's logger, kept (not printed)."""
    handler = _Keep()
    loggers = [logging.getLogger("kopf.objects"), logging.getLogger("takoform_operator")]
    saved = [(each.propagate, each.level) for each in loggers]
    for each in loggers:
        each.addHandler(handler)
        each.propagate = False
        each.setLevel(logging.DEBUG)
    yield handler
    for each, (propagate, level) in zip(loggers, saved, strict=True):
        each.removeHandler(handler)
        each.propagate, each.level = propagate, level


def _kopf_warning(kept: _Keep) -> logging.LogRecord:
    logger = ObjectLogger(body=kopf.Body(BODY), settings=kopf.OperatorSettings())
    logger.warning("Patching failed with inconsistencies: (('remove', ('status',), {}, None),)")
    (record,) = kept.records
    assert hasattr(record, "settings")  # what kopf puts there, which the line must not carry
    return record


def test_a_kopf_object_line_in_json_names_the_object_without_kopfs_settings(kept: _Keep) -> None:
    line = JsonFormatter().format(_kopf_warning(kept))
    decoded = json.loads(line)
    assert decoded["logger"] == "kopf.objects"
    assert decoded["level"] == "WARNING"
    assert decoded["message"].startswith("Patching failed")
    assert (decoded["kind"], decoded["namespace"], decoded["name"], decoded["uid"]) == (
        "Bucket",
        "team-a",
        "logs",
        UID,
    )
    assert not {"settings", "k8s_ref", "k8s_skip"} & set(decoded)
    assert "OperatorSettings" not in line
    # 2,136 bytes with kopf's settings object; the line is the message and the object now.
    assert len(line.encode()) < 400


def test_a_kopf_object_line_in_text_names_the_object(kept: _Keep) -> None:
    line = TextFormatter().format(_kopf_warning(kept))
    assert line.endswith(f" kind=Bucket namespace=team-a name=logs uid={UID}")
    assert "WARNING kopf.objects: Patching failed" in line
    assert "OperatorSettings" not in line


def test_the_operators_line_about_a_cr_carries_its_fields(kept: _Keep) -> None:
    logger = logging.getLogger("takoform_operator")
    logger.warning("status write lost; retrying in %.1f s", 1.5, extra=log_fields(BODY, "eu-1"))
    (record,) = kept.records
    decoded = json.loads(JsonFormatter().format(record))
    assert decoded["message"] == "status write lost; retrying in 1.5 s"
    assert {key: decoded[key] for key in ("kind", "namespace", "name", "uid", "host")} == {
        "kind": "Bucket",
        "namespace": "team-a",
        "name": "logs",
        "uid": UID,
        "host": "eu-1",
    }
    text = TextFormatter().format(record)
    assert text.endswith(
        f"retrying in 1.5 s kind=Bucket namespace=team-a name=logs uid={UID} host=eu-1"
    )


def test_every_line_of_one_look_carries_its_id_whoever_logs_it(kept: _Keep) -> None:
    """A look's lines are found together: the operator's, the host client's, kopf's."""
    ours, kopf_objects = logging.getLogger("takoform_operator"), logging.getLogger("kopf.objects")
    with look() as first:
        ours.warning("status write lost", extra=log_fields(BODY))
        kopf_objects.warning("Patching failed")
        lines = [json.loads(JsonFormatter().format(r)) for r in kept.records]
        text = TextFormatter().format(kept.records[0])
    assert [line["look"] for line in lines] == [first, first]
    assert text.endswith(f"uid={UID} look={first}")
    with look() as second:
        assert second != first
    assert "look" not in json.loads(JsonFormatter().format(kept.records[0])), "outside a look"


def test_a_line_about_no_cr_is_unchanged_in_text_and_a_traceback_stays_below(
    kept: _Keep,
) -> None:
    logger = logging.getLogger("takoform_operator")
    logger.info("metrics on %s:%d/metrics", "0.0.0.0", 8000)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logger.exception("reconcile failed", extra={"cr": {"name": "a b", "kind": "Bucket"}})
    plain, failed = (TextFormatter().format(record) for record in kept.records)
    assert plain.endswith("INFO takoform_operator: metrics on 0.0.0.0:8000/metrics")
    first, _, rest = failed.partition("\n")
    assert first.endswith('reconcile failed kind=Bucket name="a b"')
    assert rest.startswith("Traceback") and "RuntimeError: boom" in rest
    assert json.loads(JsonFormatter().format(kept.records[1]))["exception"].endswith(
        "RuntimeError: boom"
    )


def test_log_fields_take_only_what_the_body_has() -> None:
    assert log_fields({"kind": "Bucket", "metadata": {"name": "x"}}) == {
        "cr": {"kind": "Bucket", "name": "x"}
    }
    assert log_fields({"metadata": None}) == {"cr": {}}


def test_a_host_alone_is_a_field_of_its_own(kept: _Keep) -> None:
    logging.getLogger("takoform_operator").info("host eu-1: token changed", extra={"host": "eu-1"})
    (record,) = kept.records
    assert TextFormatter().format(record).endswith("token changed host=eu-1")
    assert json.loads(JsonFormatter().format(record))["host"] == "eu-1"


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        cli_main(["--version"])
    assert ended.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out == (
        f"takoform-operator {version('takoform-operator')} "
        f"(python {platform.python_version()}, kopf {version('kopf')})"
    )


def test_the_plugin_prints_its_version_too(capsys: pytest.CaptureFixture[str]) -> None:
    from takoform_operator.plugin.commands import parser

    with pytest.raises(SystemExit) as ended:
        parser("kubectl takoform").parse_args(["--version"])
    assert ended.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out == f"kubectl takoform {version('takoform-operator')} (the takoform-operator package)"


def test_build_info_is_one_series_at_one() -> None:
    text = generate_latest(Metrics(CollectorRegistry()).registry).decode()
    series = [line for line in text.splitlines() if line.startswith("takoform_build_info{")]
    assert series == [
        f'takoform_build_info{{kopf="{version("kopf")}",python="{platform.python_version()}",'
        f'version="{version("takoform-operator")}"}} 1.0'
    ]
