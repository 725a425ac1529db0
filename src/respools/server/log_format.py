"""Structured logs: one JSON object per line, so that log pipelines can index fields such as
``request_id`` and ``lease_id`` without parsing prose."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

_STANDARD_ATTRS = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """Formats a record as JSON; attributes given through ``extra=`` become top-level fields."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD_ATTRS and key != "color_message" and not key.startswith("_"):
                payload[key] = value
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)


def configure_logging(level: str = "INFO", as_json: bool = True, access_log: bool = False) -> None:
    """Route the ``respools`` and ``uvicorn`` loggers to stderr, as JSON unless told otherwise. Access
    logs (one line per HTTP request) are off unless asked for: at a thousand leases a second they would
    be most of the output."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter() if as_json else logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
    )
    for name in ("respools", "uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler] if name != "uvicorn.access" or access_log else []
        logger.setLevel(level.upper())
        logger.propagate = False
