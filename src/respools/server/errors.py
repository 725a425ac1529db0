"""Every refusal is a 4xx with an :class:`~respools.model.ErrorBody` that names the field at fault and
says what to do; nothing a client sends may produce a 500. Handlers here translate FastAPI's validation
errors, the scheduling core's :class:`DefinitionError` and store failures into that shape."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from respools.model import ErrorBody
from respools.scheduling import DefinitionError
from respools.server.db.database import DatabaseUnavailable

log = logging.getLogger(__name__)

_FIELD_LEAD = re.compile(
    r"^(?P<field>[a-z_][a-z0-9_]*(?:\.[A-Za-z0-9_.\-]+|\[\d+\])*)(?P<sep>: | \(| must | cannot | is | has )", re.S
)
"""Model validators start their messages with the field at fault ("reserved.gpu (gpu 4) exceeds…",
"end must be after start", "capacity.gpu: …"); that lead word becomes the ErrorBody's field."""
_NAME_HINT = "use 1-63 lowercase letters, digits, '.', '_' or '-', starting and ending with a letter or digit"


class ApiError(Exception):
    """A refusal with its HTTP status, message and the field at fault."""

    def __init__(self, status: int, detail: str, field: str | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.field = field


def not_found(kind: str, name: str, field: str | None = None) -> ApiError:
    return ApiError(404, f"{kind} {name!r} does not exist", field)


def conflict(detail: str, field: str | None = None) -> ApiError:
    return ApiError(409, detail, field)


def invalid(detail: str, field: str | None = None) -> ApiError:
    return ApiError(422, detail, field)


def forbidden(detail: str) -> ApiError:
    return ApiError(403, detail)


def error_response(
    status: int, detail: str, field: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    body = ErrorBody(detail=detail, field=field).model_dump(mode="json")
    return JSONResponse(status_code=status, content=body, headers=headers)


def _field_of(loc: Sequence[Any]) -> str | None:
    parts: list[str] = []
    for item in loc[1:] if loc and loc[0] in {"body", "query", "path", "header", "cookie"} else loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif str(item).startswith("function-") or item in {"dict[str,int]", "list[Host]"}:
            continue
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts) or None


def describe_validation_error(error: dict[str, Any]) -> tuple[str, str | None]:
    """A sentence for one pydantic error, and the field it concerns."""
    field = _field_of(error.get("loc", ()))
    kind = error.get("type", "")
    message = str(error.get("msg", "invalid value"))
    message = message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    match = _FIELD_LEAD.match(message)
    if match and kind == "value_error":
        inner = match.group("field")
        field = f"{field}.{inner}" if field and not inner.startswith(field) else inner
        if match.group("sep") == ": ":
            message = message[match.end() :]
    if kind == "missing":
        return f"{field} is required: add it", field
    if kind == "extra_forbidden":
        return f"unknown field {field!r}: remove it or check its spelling", field
    if kind == "json_invalid":
        ctx = error.get("ctx", {})
        return f"the body is not valid JSON ({ctx.get('error', message)}): send a JSON object", None
    if kind == "string_pattern_mismatch":
        return f"{field}: {error.get('input')!r} is not a valid name: {_NAME_HINT}", field
    if kind == "model_attributes_type" or (kind == "dict_type" and field is None):
        return "the body must be a JSON object", field
    subject = f"{field}: " if field else ""
    return f"{subject}{message}", field


async def _on_api_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return error_response(exc.status, exc.detail, exc.field, headers)


async def _on_validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    if not errors:
        return error_response(422, "the request is invalid")
    detail, field = describe_validation_error(errors[0])
    if len(errors) > 1:
        detail += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return error_response(422, detail, field)


async def _on_definition_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, DefinitionError)
    return error_response(422, exc.message, exc.field)


async def _on_http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    if exc.status_code == 404 and detail == "Not Found":
        detail = "no such endpoint: see /docs for the API"
    elif exc.status_code == 405:
        detail = "method not allowed on this endpoint: see /docs for the API"
    return error_response(exc.status_code, detail, headers=dict(exc.headers) if exc.headers else None)


async def _on_unavailable(_: Request, exc: Exception) -> JSONResponse:
    log.warning("database unavailable", extra={"error": str(exc)})
    return error_response(503, "the database is unavailable; retry shortly", headers={"Retry-After": "1"})


def unexpected_response(path: str) -> JSONResponse:
    """A 500 for an exception no handler knew, logged (with its traceback, so call it in the ``except``)
    under an incident id the answer names."""
    incident = uuid.uuid4().hex[:12]
    log.exception("unhandled error", extra={"incident": incident, "path": path})
    return error_response(500, f"internal error (incident {incident}); the server log has the details")


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    return unexpected_response(request.url.path)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _on_api_error)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(DefinitionError, _on_definition_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(DatabaseUnavailable, _on_unavailable)
    app.add_exception_handler(Exception, _on_unexpected)
