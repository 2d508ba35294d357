"""Log output: one JSON object per line (for log collectors) or plain text, at a chosen level.

A line about one custom resource carries its `kind`, `namespace`, `name`, `uid` and `host` as
fields: the operator's own lines pass them as `extra={"cr": {...}}` (kube.crs.log_fields;
`name` cannot be an extra of its own, a LogRecord has one), kopf's per-object lines carry them
in its object reference (`k8s_ref`); `host` alone may also be an extra of its own. Every line
logged within one look at a CR (one reconcile: kube.handlers) also carries that look's id,
`look`, whatever logger wrote it (the host client's, kopf's), so one look's lines are found
together. In JSON they are members of the object; in text they follow the message as
`key=value`. kopf's per-object
records also carry its whole settings object (about 2 KB), which says nothing about the line:
never logged.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import secrets
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any

from pythonjsonlogger import json as json_logger

# Attributes every LogRecord has; anything else on a record came in through `extra=`.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}

#: The fields of a line about one CR, in the order they are written.
CR_FIELDS = ("kind", "namespace", "name", "uid", "host", "look")

#: The id of the look the running code belongs to ("": none).
_LOOK: ContextVar[str] = ContextVar("takoform_look", default="")


@contextlib.contextmanager
def look() -> Iterator[str]:
    """One look at a CR: the lines logged inside carry a new id (8 hex digits)."""
    token = _LOOK.set(secrets.token_hex(4))
    try:
        yield _LOOK.get()
    finally:
        _LOOK.reset(token)


#: Extras that are not written as they are: kopf's settings object and posting flag (dropped),
#: the operator's `cr` and kopf's object reference (their members become the CR fields above).
_NOT_AS_THEY_ARE = {"settings", "k8s_skip", "k8s_ref", "cr"}

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def fields(record: logging.LogRecord) -> dict[str, Any]:
    """The record's extras: the CR fields first (from `extra=` or kopf's object reference),
    then any other extra; kopf's settings object never."""
    extras = {
        key: value
        for key, value in vars(record).items()
        if key not in _STANDARD and key not in _NOT_AS_THEY_ARE and not key.startswith("_")
    }
    if look_id := _LOOK.get():
        extras.setdefault("look", look_id)
    for source in (getattr(record, "cr", None), getattr(record, "k8s_ref", None)):
        if isinstance(source, Mapping):
            for key in CR_FIELDS:
                if source.get(key) not in (None, ""):
                    extras.setdefault(key, source[key])
    ordered = {key: extras.pop(key) for key in CR_FIELDS if extras.get(key) not in (None, "")}
    extras = {key: value for key, value in extras.items() if key not in CR_FIELDS}
    return ordered | extras


class JsonFormatter(json_logger.JsonFormatter):
    """`{"time": ..., "level": ..., "logger": ..., "message": ..., "kind": ..., ...}` on one
    line: python-json-logger's formatter with the CR fields of `fields` and a time in
    milliseconds (UTC) first."""

    def __init__(self) -> None:
        super().__init__(
            ["levelname", "name", "message"],
            rename_fields={"levelname": "level", "name": "logger", "exc_info": "exception"},
            # What `fields` writes differently or not at all is no extra of its own.
            reserved_attrs=[*_STANDARD, *_NOT_AS_THEY_ARE],
        )

    def add_fields(
        self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        log_data["time"] = dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
            timespec="milliseconds"
        )
        super().add_fields(log_data, record, message_dict)
        for key, value in fields(record).items():
            log_data.setdefault(key, value)


class TextFormatter(logging.Formatter):
    """`time LEVEL logger: message kind=Bucket namespace=team-a name=logs ...`: the CR fields
    after the message, a value with a space or a quote in it quoted."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        cr = {key: value for key, value in fields(record).items() if key in CR_FIELDS}
        if not cr:
            return text
        pairs = " ".join(f"{key}={_text_value(value)}" for key, value in cr.items())
        head, newline, rest = text.partition("\n")  # a traceback stays below the line
        return f"{head} {pairs}{newline}{rest}"


def _text_value(value: Any) -> str:
    text = str(value)
    if not text or any(c.isspace() or c in "\"'=" for c in text):
        return json.dumps(text)
    return text


def configure(fmt: str = "text", level: str = "INFO") -> None:
    """Replace the root logger's handlers with one on stderr in `fmt` ("json" or "text")."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
