"""The name this machine goes by in a pool's inventory.

The agent registers the host under this name and the backend refuses to realize a lease placed elsewhere,
so both must derive it the same way; ``RESPOOLS_HOST_NAME`` overrides it where the kernel hostname is not
what the platform team calls the machine (containers, cloned VMs).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping

HOST_NAME_ENV = "RESPOOLS_HOST_NAME"
_NOT_ALLOWED = re.compile(r"[^a-z0-9._-]+")
_MAX_LEN = 63


def normalize_host_name(raw: str) -> str:
    """Fold a hostname into the contract's name pattern (lowercase, ``[a-z0-9._-]``, at most 63 chars)."""
    name = _NOT_ALLOWED.sub("-", raw.strip().lower())[:_MAX_LEN].strip("._-")
    if not name:
        raise ValueError(f"cannot make a host name out of {raw!r}; set {HOST_NAME_ENV}")
    return name


def local_host_name(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return normalize_host_name(env.get(HOST_NAME_ENV) or socket.gethostname())
