"""What the SDK logs while a step waits for its grant, on a host without a terminal (ZenML's logs): a line
per change of the wait, and nothing at all for a request granted at once."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest

from respools.client.progress import WaitProgress
from respools.model import Request, RequestSpec, RequestState, WaitReason

SPEC = RequestSpec(resources={"gpu": 1})


def request(state: RequestState, **more: object) -> Request:
    return Request.model_validate(
        {"id": "req_1", "subject": "team", "resources": {"gpu": 1}, "state": state, "submitted_at": datetime.now(UTC)}
        | more
    )


def test_a_request_granted_at_once_logs_no_wait(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO), WaitProgress(SPEC, interactive=False) as progress:
        progress.update(request(RequestState.GRANTED, lease_id="lse_1"))
    assert not [r for r in caplog.records if "waiting for" in r.getMessage()]


def test_a_waiting_request_logs_each_change_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO), WaitProgress(SPEC, interactive=False) as progress:
        waiting = request(RequestState.PENDING, queue_position=2, wait_reason=WaitReason.NO_CAPACITY)
        progress.update(waiting)
        progress.update(waiting)
        progress.update(request(RequestState.PENDING, queue_position=1, wait_reason=WaitReason.NO_CAPACITY))
        progress.update(request(RequestState.GRANTED, lease_id="lse_1"))
    lines = [r.getMessage() for r in caplog.records if "waiting for" in r.getMessage()]
    assert len(lines) == 2 and "position 2" in lines[0] and "position 1" in lines[1], lines
