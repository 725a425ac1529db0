"""Reports a fenced holder's release once the holder's process is gone (standard library only).

A ``respools.lease()`` block still running at its preemption deadline ends its own process (DESIGN §2.8),
which is the workload: a release sent *before* the exit would let the service hand the GPUs over while
the process, and its GPU memory, are still there (measured at about 12 ms of overlap on the local stack).
So the holder starts this script in a session of its own and exits; the script waits until the holder's
PID is gone (exited, or a zombie: its memory is freed by then), then releases the lease, trying every
replica URL with back-off. It is run as a file (``python -I fence_reporter.py``), not as part of the
``respools`` package, so it starts in milliseconds and shares no state (locks, connections) with the
process it reports for.

Environment: ``RESPOOLS_FENCE_PID``, ``RESPOOLS_FENCE_LEASE``, ``RESPOOLS_FENCE_URLS`` (comma-separated),
``RESPOOLS_FENCE_TOKEN`` (may be empty).
"""

from __future__ import annotations

import os
import sys
import time
import urllib.error
import urllib.request

WAIT_FOR_EXIT_S = 600.0
ATTEMPTS = 12


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def release(urls: list[str], lease_id: str, token: str) -> bool:
    headers = {"Accept": "application/json", "User-Agent": "respools-fence"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    for attempt in range(ATTEMPTS):
        for url in urls:
            request = urllib.request.Request(
                f"{url}/v1/leases/{lease_id}/release", data=b"", method="POST", headers=headers
            )
            try:
                with urllib.request.urlopen(request, timeout=10):
                    return True
            except urllib.error.HTTPError as exc:
                if exc.code < 500:
                    return True  # refused for good (ended already, or not ours): nothing to retry
            except OSError:
                pass
        time.sleep(min(5.0, 0.1 * 2**attempt))
    return False


def main() -> int:
    pid = int(os.environ["RESPOOLS_FENCE_PID"])
    lease_id = os.environ["RESPOOLS_FENCE_LEASE"]
    urls = [url for url in os.environ["RESPOOLS_FENCE_URLS"].split(",") if url]
    token = os.environ.get("RESPOOLS_FENCE_TOKEN", "")
    deadline = time.monotonic() + WAIT_FOR_EXIT_S
    while not gone(pid):
        if time.monotonic() > deadline:
            return 1  # still there: leave the lease to its backend's confirmation or its TTL
        time.sleep(0.002)
    return 0 if release(urls, lease_id, token) else 1


if __name__ == "__main__":
    sys.exit(main())
