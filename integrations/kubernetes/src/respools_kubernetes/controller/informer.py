"""List + watch of one resource kind, kept in a local cache: client-go's informer, on the official client.

A watch resumes from the last ``resourceVersion`` it saw (bookmarks move it on while nothing changes);
when the server answers ``410 Gone`` (the version is too old to resume from) the informer lists again
and reports the differences as events, so nothing that changed meanwhile is missed. API errors and lost
connections are retried with capped exponential backoff and jitter.
"""

from __future__ import annotations

import functools
import json
import logging
import random
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError, ProtocolError, ReadTimeoutError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]
"""(namespace, name); the namespace is "" for cluster-scoped objects."""
Handler = Callable[[str, Obj], None]
"""Called with ``ADDED``/``MODIFIED``/``DELETED`` and the object (API JSON)."""

_GONE = 410
_BACKOFF_START_S = 0.5
_BACKOFF_MAX_S = 30.0
_CONNECT_TIMEOUT_S = 10.0


def key_of(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


class Backoff:
    """Capped exponential delays with full jitter, reset after a success."""

    def __init__(self, start_s: float = _BACKOFF_START_S, cap_s: float = _BACKOFF_MAX_S) -> None:
        self._start_s = start_s
        self._cap_s = cap_s
        self._attempt = 0

    def next_delay(self) -> float:
        delay = min(self._cap_s, self._start_s * 2**self._attempt)
        self._attempt += 1
        return random.uniform(delay / 2, delay)

    def reset(self) -> None:
        self._attempt = 0


class Informer:
    """Keeps ``cache`` equal to the server's objects of one kind and calls ``handler`` on each change.

    ``list_call`` is a client method that lists (and, with ``watch=True``, watches) the kind, such as
    ``CoreV1Api.list_node`` or ``BatchV1Api.list_job_for_all_namespaces``.
    """

    def __init__(self, name: str, list_call: Callable[..., Any], handler: Handler, watch_timeout_s: int) -> None:
        self.name = name
        self._list_call = _lowercase_watch(list_call)
        self._handler = handler
        self._watch_timeout_s = watch_timeout_s
        self._lock = threading.Lock()
        self._cache: dict[Key, Obj] = {}
        self._watch: watch.Watch | None = None
        self.synced = threading.Event()
        """Set once the first list is in the cache."""
        self.relists = 0
        """Lists after the first one (410 Gone, or a watch that could not resume)."""

    # -- the cache ---------------------------------------------------------------------------------

    def get(self, key: Key) -> Obj | None:
        with self._lock:
            return self._cache.get(key)

    def items(self) -> list[Obj]:
        with self._lock:
            return list(self._cache.values())

    def put(self, obj: Obj) -> None:
        """Record what a write of ours returned, so the next look does not act on a stale copy. Only an
        object the cache still holds is replaced: one the watch reported deleted meanwhile stays gone, and
        one we created arrives through the watch."""
        with self._lock:
            current = self._cache.get(key_of(obj))
            if current is not None and _version(obj) >= _version(current):
                self._cache[key_of(obj)] = obj

    # -- the loop ----------------------------------------------------------------------------------

    def run(self, stopping: threading.Event) -> None:
        backoff = Backoff()
        version: str | None = None
        while not stopping.is_set():
            try:
                if version is None:
                    version = self._relist()
                version = self._follow(version, stopping)
                backoff.reset()
            except ApiException as exc:
                if exc.status == _GONE:
                    log.info("%s: resourceVersion %s is gone (410); listing again", self.name, version)
                    version = None
                    continue
                delay = backoff.next_delay()
                log.warning("%s: API error %s %s; retrying in %.1f s", self.name, exc.status, exc.reason, delay)
                stopping.wait(delay)
            except ReadTimeoutError:
                continue  # a quiet watch outlived its read timeout: resume from the same version
            except (HTTPError, ProtocolError, OSError, ValueError) as exc:
                delay = backoff.next_delay()
                log.warning("%s: connection problem (%s); retrying in %.1f s", self.name, exc, delay)
                stopping.wait(delay)
            except Exception:
                # Whatever went wrong, a dead informer would leave the controller blind: list afresh.
                delay = backoff.next_delay()
                log.exception("%s: unexpected failure; listing again in %.1f s", self.name, delay)
                version = None
                stopping.wait(delay)

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.stop()

    def _relist(self) -> str:
        response = self._list_call(_preload_content=False, _request_timeout=(_CONNECT_TIMEOUT_S, 60))
        body = json.loads(response.data)
        fresh = {key_of(obj): obj for obj in body.get("items") or []}
        with self._lock:
            old, self._cache = self._cache, fresh
        if self.synced.is_set():
            self.relists += 1
        for key, obj in old.items():
            if key not in fresh:
                self._handler("DELETED", obj)
        for key, obj in fresh.items():
            self._handler("MODIFIED" if key in old else "ADDED", obj)
        self.synced.set()
        version: str = (body.get("metadata") or {}).get("resourceVersion") or ""
        return version

    def _follow(self, version: str, stopping: threading.Event) -> str | None:
        """Watch from ``version`` until the server ends the watch; the version to resume from."""
        self._watch = watch.Watch()
        options: dict[str, Any] = {
            "allow_watch_bookmarks": True,
            "timeout_seconds": self._watch_timeout_s,
            "_request_timeout": (_CONNECT_TIMEOUT_S, self._watch_timeout_s + 5),
        }
        if version:
            options["resource_version"] = version
        for event in self._watch.stream(self._list_call, **options):
            if stopping.is_set():
                break
            kind = event["type"]
            obj: Obj = event["raw_object"]
            version = (obj.get("metadata") or {}).get("resourceVersion") or version
            if kind == "BOOKMARK":
                continue
            with self._lock:
                if kind == "DELETED":
                    self._cache.pop(key_of(obj), None)
                else:
                    self._cache[key_of(obj)] = obj
            self._handler(kind, obj)
        return version


def _lowercase_watch(list_call: Callable[..., Any]) -> Callable[..., Any]:
    """``list_call`` sending ``watch=true`` as client-go and kubectl do, where the Python client sends
    ``watch=True``: Go's API server parses both, stricter servers and emulators only the former."""

    @functools.wraps(list_call)
    def call(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("watch") is True:
            kwargs["watch"] = "true"
        return list_call(*args, **kwargs)

    return call


def _version(obj: Obj) -> int:
    """resourceVersion as a number where it is one (it is opaque, but etcd's are integers); else 0."""
    value = (obj.get("metadata") or {}).get("resourceVersion") or ""
    return int(value) if str(value).isdigit() else 0
