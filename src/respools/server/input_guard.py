"""What no route should have to think about: input the store cannot hold, bodies past a size, and an
error that escaped every handler.

- **NUL.** PostgreSQL cannot store U+0000 in text or JSON; a NUL in a label, a key, a description or a
  path id would reach it and fail there as a 500. Every request's path, query and JSON body is checked
  once, here, and refused with a 422 naming the field, before any route reads it.
- **Size.** A body past ``max_body_bytes`` is refused with a 413 before it is read whole.
- **Unexpected errors.** Starlette answers an unhandled exception with the app's 500 handler and then
  re-raises it, and uvicorn closes the connection on the way out: every client on a keep-alive
  connection pays a reconnect for one bad request. Caught here, the 500 is an ordinary answer and the
  connection stays open.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, unquote_to_bytes

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from respools.server.errors import error_response, unexpected_response

_NUL_ESCAPES = (b"\x00", b"\\u0000")


class InputGuard:
    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = _nul_in_path_or_query(scope)
        if refusal is None and _declared_length(scope) > self.max_body_bytes:
            refusal = _too_large(self.max_body_bytes)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        replay = receive
        if scope["method"] in ("POST", "PUT", "PATCH"):
            body, more = await _read_body(receive, self.max_body_bytes)
            if body is None:
                await _too_large(self.max_body_bytes)(scope, receive, send)
                return
            refusal = _nul_in_body(body)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
            replay = _replaying(body, more, receive)
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, replay, tracking)
        except Exception:
            if started:
                raise  # half an answer is out: nothing sensible can follow it on this connection
            response = unexpected_response(scope.get("path", ""))
            await response(scope, replay, send)


def _too_large(limit: int) -> JSONResponse:
    return error_response(413, f"the body is larger than {limit} bytes: send less (split the change)", "body")


def _declared_length(scope: Scope) -> int:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


async def _read_body(receive: Receive, limit: int) -> tuple[bytes | None, bool]:
    """The whole body, or ``None`` past ``limit``; and whether the stream had more to say (a disconnect)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), True
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None, False
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), False


def _replaying(body: bytes, disconnected: bool, receive: Receive) -> Receive:
    """Hands the body read here to the app once, then the connection's own messages (a long-poll listens
    for the client going away)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        if disconnected:
            return {"type": "http.disconnect"}
        return await receive()

    return replay


def _refuse_nul(field: str) -> JSONResponse:
    return error_response(
        422,
        f"{field}: text must not contain the NUL character (U+0000); remove it",
        field,
    )


def _nul_in_path_or_query(scope: Scope) -> JSONResponse | None:
    if "\x00" in scope.get("path", ""):
        return _refuse_nul("path")
    query: bytes = scope.get("query_string", b"")
    if b"%00" in query or b"\x00" in query:
        for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
            if "\x00" in name or "\x00" in value or b"\x00" in unquote_to_bytes(value):
                return _refuse_nul(name.replace("\x00", "") or "query")
        return _refuse_nul("query")
    return None


def _nul_in_body(body: bytes) -> JSONResponse | None:
    if not any(escape in body for escape in _NUL_ESCAPES) and b"\\U0000" not in body:
        return None
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return _refuse_nul("body")  # not JSON: the route's own parsing would refuse it, this says why first
    for path in _paths_with_nul(document, ""):
        return _refuse_nul(path or "body")
    return None


def _paths_with_nul(value: Any, path: str) -> Iterator[str]:
    if isinstance(value, str):
        if "\x00" in value:
            yield path
    elif isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if "\x00" in key:
                yield where.replace("\x00", "\\u0000")
            yield from _paths_with_nul(item, where)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths_with_nul(item, f"{path}[{index}]")
