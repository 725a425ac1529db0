"""Finding backends: the ``respools.backends`` entry-point group, so a stack integration (or a third
party) plugs in by declaring an entry point, without the core importing it.

A plugin that fails to import must not take the others down: listing skips it with a warning, and asking
for it by name raises :class:`BackendError` with the import error. The builtin ``local`` backend is also
known without installed metadata (running from a source tree), and installed metadata wins.
"""

from __future__ import annotations

import logging
import threading
from importlib import metadata

from respools.backends.protocol import Backend, BackendError

log = logging.getLogger(__name__)

GROUP = "respools.backends"
_BUILTIN = {"local": "respools.backends.local:LocalBackend"}

_instances: dict[str, Backend] = {}
_lock = threading.Lock()


def _entry_points() -> dict[str, metadata.EntryPoint]:
    found = {name: metadata.EntryPoint(name=name, value=value, group=GROUP) for name, value in _BUILTIN.items()}
    found.update({ep.name: ep for ep in metadata.entry_points(group=GROUP)})
    return found


def _load(entry_point: metadata.EntryPoint) -> type[Backend]:
    try:
        loaded = entry_point.load()
    except Exception as exc:
        raise BackendError(
            f"backend {entry_point.name!r} ({entry_point.value}) failed to load: {type(exc).__name__}: {exc}"
        ) from exc
    if not (isinstance(loaded, type) and issubclass(loaded, Backend)):
        raise BackendError(
            f"backend {entry_point.name!r} ({entry_point.value}) is not a respools.backends.Backend subclass"
        )
    if getattr(loaded, "name", None) != entry_point.name:
        raise BackendError(
            f"backend {entry_point.name!r} ({entry_point.value}) calls itself "
            f"{getattr(loaded, 'name', None)!r}; the entry-point name and Backend.name must agree"
        )
    return loaded


def available_backends() -> dict[str, type[Backend]]:
    """Every backend that loads, by name; broken plugins are logged and left out."""
    backends: dict[str, type[Backend]] = {}
    for name, entry_point in sorted(_entry_points().items()):
        try:
            backends[name] = _load(entry_point)
        except BackendError as exc:
            log.warning("%s", exc)
    return backends


def get_backend(name: str) -> Backend:
    """The (cached) backend instance for a pool's ``stack``; :class:`BackendError` names the known ones."""
    with _lock:
        cached = _instances.get(name)
        if cached is not None:
            return cached
        entry_points = _entry_points()
        if name not in entry_points:
            known = ", ".join(sorted(entry_points)) or "none"
            raise BackendError(f"unknown stack {name!r}: known backends are {known} (entry-point group {GROUP!r})")
        instance = _load(entry_points[name])()
        _instances[name] = instance
        return instance


def clear_cache() -> None:
    """Forget the cached instances (tests, or after installing a plugin into a running process)."""
    with _lock:
        _instances.clear()
