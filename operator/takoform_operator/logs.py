"""Log output: one JSON object per line (for log collectors) or plain text, at a chosen level."""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any

# Attributes every LogRecord has; anything else on a record came in through `extra=` (kopf puts
# the object's reference there) and is kept in the JSON line.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """`{"time": ..., "level": ..., "logger": ..., "message": ..., ...}` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure(fmt: str = "text", level: str = "INFO") -> None:
    """Replace the root logger's handlers with one on stderr in `fmt` ("json" or "text")."""
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
