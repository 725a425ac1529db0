"""Conversion between the ``kubernetes`` client's models and the API's JSON.

Realizations travel as plain JSON (``Realization.native``), but they are built from, and read back into,
the client's own models, so a field the API does not have fails here rather than on the cluster.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from kubernetes.client import ApiClient, Configuration


@dataclass(frozen=True)
class _Body:
    """The one attribute ``ApiClient.deserialize`` reads from an HTTP response."""

    data: str


@functools.cache
def _codec() -> ApiClient:
    return ApiClient(Configuration())


def to_api_json(model: Any) -> Any:
    """A client model (or list of them) as the API's JSON: camelCase keys, unset fields left out."""
    return _codec().sanitize_for_serialization(model)


def from_api_json(data: Any, type_name: str) -> Any:
    """API JSON as a client model, e.g. ``from_api_json(d, "V1Pod")`` or ``"list[V1Toleration]"``."""
    return _codec().deserialize(_Body(json.dumps(data)), type_name)
