"""Answers of the hot routes, serialized once by the model itself.

A route that returns a model makes FastAPI validate it against the route's ``response_model`` and then
serialize it, and for a plain ``def`` route the validation takes a second trip through the thread pool.
The models these routes answer with are built from the store's own rows or from what the route just
wrote (see :mod:`respools.server.codec`), so validating them again finds nothing: the routes return
their JSON as it is. Their ``response_model`` stays declared, for the OpenAPI document.
"""

from __future__ import annotations

from fastapi import Response, status
from pydantic import BaseModel


def model_answer(model: BaseModel, status_code: int = status.HTTP_200_OK) -> Response:
    """``model`` as FastAPI would have serialized it for a ``response_model`` of its own type."""
    return Response(model.model_dump_json(by_alias=True), status_code=status_code, media_type="application/json")
