"""The heartbeat schedule: never later than an interval, kept to its phase through a stall."""

from __future__ import annotations

import random

import pytest

from respools.client.monitor import BEAT_JITTER, BeatSchedule

INTERVAL = 20.0


def test_a_late_answer_keeps_the_phase() -> None:
    beats = BeatSchedule(INTERVAL, 0.0, first_in=INTERVAL)
    beats.beaten(25.0)  # answered 5 s late (a stall on the server)
    assert INTERVAL * (2 - BEAT_JITTER) <= beats.due <= 2 * INTERVAL  # due from 20, not from 25


def test_a_beat_more_than_an_interval_late_starts_afresh() -> None:
    beats = BeatSchedule(INTERVAL, 0.0, first_in=INTERVAL)
    beats.beaten(50.0)  # the server was down for longer than an interval
    assert 50.0 + INTERVAL * (1 - BEAT_JITTER) <= beats.due <= 50.0 + INTERVAL


@pytest.mark.parametrize("seed", range(5))
def test_no_gap_between_answer_and_next_beat_exceeds_the_interval(seed: int) -> None:
    delays = random.Random(seed)
    beats = BeatSchedule(INTERVAL, 0.0)
    assert beats.due <= INTERVAL
    for _ in range(500):
        answered = beats.due + delays.choice([0.0, 0.01, 3.0, 19.0, 45.0])
        beats.beaten(answered)
        assert answered < beats.due <= answered + INTERVAL


def test_holders_started_together_drift_apart_and_stay_apart_through_a_stall() -> None:
    random.seed(7)
    holders = [BeatSchedule(INTERVAL, 0.0) for _ in range(200)]
    for _ in range(3):
        for beats in holders:
            beats.beaten(beats.due)
    stall_ends = max(beats.due for beats in holders) + 1.0  # every holder's beat waits out one stall
    for beats in holders:
        beats.beaten(stall_ends)
    dues = sorted(beats.due for beats in holders)
    busiest_second = max(sum(1 for due in dues if start <= due < start + 1.0) for start in dues)
    assert busiest_second < len(holders) // 2  # answered-plus-interval would put all 200 in the same instant
