"""Borrowing, fair share, priorities and preemption beyond the ZenML table (DESIGN §2.3–2.6)."""

from __future__ import annotations

from datetime import timedelta

from respools.model import PreemptReason, RequestState, WaitReason

from .sim import Sim, policy, pool


def test_idle_capacity_is_shared_in_proportion_to_weights() -> None:
    # DESIGN §2.6: 11 GPUs, two subjects reserved 2 each, weights 1:4, both asking for 10 → 3 and 8.
    sim = Sim(
        [pool("p", gpu=11)],
        [policy("a", "p", reserved={"gpu": 2}, weight=1), policy("b", "p", reserved={"gpu": 2}, weight=4)],
    )
    for _ in range(10):
        sim.submit("a", True, gpu=1)
        sim.submit("b", True, gpu=1)
    sim.step()
    assert (sim.held("a"), sim.held("b")) == (3, 8)


def test_weight_zero_borrows_only_what_nobody_else_wants() -> None:
    sim = Sim(
        [pool("p", gpu=6)],
        [policy("a", "p", reserved={"gpu": 1}, weight=0), policy("b", "p", reserved={"gpu": 1})],
    )
    for _ in range(3):
        sim.submit("a", True, gpu=1)
    for _ in range(4):
        sim.submit("b", True, gpu=1)
    sim.step()
    assert sim.held("b") == 4 and sim.held("a") == 2


def test_in_share_waiter_goes_before_a_borrower_submitted_earlier() -> None:
    sim = Sim([pool("p", gpu=4)], [policy("a", "p", reserved={"gpu": 2}), policy("b", "p", reserved={"gpu": 2})])
    sim.submit("a", True, gpu=2)
    sim.step()
    late_borrow = sim.submit("a", True, gpu=2)
    in_share = sim.submit("b", True, gpu=2)
    sim.step()
    assert sim.requests[in_share].state == RequestState.GRANTED
    assert sim.requests[late_borrow].state == RequestState.PENDING


def test_higher_policy_priority_is_served_first() -> None:
    sim = Sim([pool("p", gpu=2)], [policy("low", "p", priority=1), policy("high", "p", priority=5)])
    first = sim.submit("low", True, gpu=2)
    second = sim.submit("high", True, gpu=2)
    sim.step()
    assert sim.requests[second].state == RequestState.GRANTED
    assert sim.requests[first].state == RequestState.PENDING


def test_a_big_head_does_not_block_smaller_requests_behind_it() -> None:
    sim = Sim([pool("p", gpu=4)], [policy("a", "p")])
    sim.submit("a", True, gpu=3)
    sim.step()
    big = sim.submit("a", True, gpu=2)
    small = sim.submit("a", True, gpu=1)
    sim.step()
    assert sim.requests[big].wait_reason == WaitReason.NO_CAPACITY
    assert sim.requests[small].state == RequestState.GRANTED


def test_reclaim_preempts_the_most_recent_borrowed_lease_first() -> None:
    sim = Sim([pool("p", gpu=4)], [policy("owner", "p", reserved={"gpu": 2}), policy("guest", "p")])
    for _ in range(4):
        sim.submit("guest", True, gpu=1)
        sim.step()
        sim.now = sim.now.replace(second=sim.now.second + 1)
    newest = max(sim.live("guest"), key=lambda lease: lease.granted_at)
    sim.submit("owner", False, gpu=1)
    d = sim.step()
    assert len(d.preemptions) == 1
    assert d.preemptions[0].lease_ids == (newest.id,)
    assert d.preemptions[0].reason == PreemptReason.RECLAIM


def test_reclaim_ignores_policy_priority_of_the_borrower() -> None:
    sim = Sim(
        [pool("p", gpu=4)],
        [policy("owner", "p", priority=1, reserved={"gpu": 2}), policy("vip", "p", priority=100)],
    )
    for _ in range(4):
        sim.submit("vip", True, gpu=1)
    sim.step()
    sim.submit("owner", False, gpu=2)
    d = sim.step()
    assert sum(len(p.lease_ids) for p in d.preemptions) == 2


def test_a_lease_without_borrowed_part_is_never_preempted_by_another_subject() -> None:
    sim = Sim(
        [pool("p", gpu=4)],
        [policy("a", "p", priority=1, reserved={"gpu": 2}), policy("b", "p", priority=100, reserved={"gpu": 2})],
    )
    sim.submit("a", True, gpu=2)
    sim.submit("b", True, gpu=2)
    sim.step()
    sim.submit("b", True, gpu=2)
    d = sim.step()
    assert not d.preemptions


def test_own_priority_preempts_own_lower_priority_lease() -> None:
    sim = Sim([pool("p", gpu=2)], [policy("a", "p", reserved={"gpu": 2})])
    low = sim.submit("a", True, priority=0, gpu=2)
    sim.step()
    sim.submit("a", True, priority=5, gpu=2)
    d = sim.step()
    assert d.preemptions[0].lease_ids == (sim.lease_of(low).id,)
    assert d.preemptions[0].reason == PreemptReason.PRIORITY


def test_waiter_above_its_limit_never_preempts_others() -> None:
    sim = Sim([pool("p", gpu=4)], [policy("a", "p", priority=9, limit={"gpu": 2}), policy("b", "p")])
    sim.submit("a", True, gpu=2)
    for _ in range(2):
        sim.submit("b", True, gpu=1)
    sim.step()
    waiter = sim.submit("a", True, gpu=1)
    d = sim.step()
    assert not d.preemptions
    assert sim.requests[waiter].wait_reason == WaitReason.LIMIT


def test_victim_set_is_minimal_after_fill_back() -> None:
    # Candidates, most recent first: 1 GPU, 2 GPUs, 1 GPU. The waiter needs 2: the greedy pass takes
    # the first two (3 GPUs), the fill-back then finds the 1-GPU lease unneeded and keeps it running.
    sim = Sim([pool("p", gpu=4)], [policy("owner", "p", reserved={"gpu": 2}), policy("guest", "p")])
    for size in (1, 2, 1):
        sim.submit("guest", True, gpu=size)
        sim.step()
        sim.now = sim.now.replace(second=sim.now.second + 1)
    two = next(lease for lease in sim.live("guest") if lease.resources["gpu"] == 2000)
    sim.submit("owner", False, gpu=2)
    d = sim.step()
    assert d.preemptions[0].lease_ids == (two.id,)


def test_capacity_freed_by_preemption_is_held_for_the_waiter() -> None:
    sim = Sim([pool("p", gpu=4)], [policy("owner", "p", reserved={"gpu": 2}), policy("guest", "p")])
    for _ in range(4):
        sim.submit("guest", True, gpu=1)
    sim.step()
    waiter = sim.submit("owner", True, gpu=2)
    sim.step()
    sim.release_preempting()
    sneaky = sim.submit("guest", True, gpu=1)
    sim.step()
    assert sim.requests[waiter].state == RequestState.GRANTED
    assert sim.requests[sneaky].state == RequestState.PENDING


def test_preempted_request_requeues_with_its_original_position() -> None:
    sim = Sim([pool("p", gpu=2)], [policy("owner", "p", reserved={"gpu": 2}), policy("guest", "p")])
    victim = sim.submit("guest", True, gpu=2, max_retries=1)
    sim.step()
    later = sim.submit("guest", True, gpu=2)
    owner = sim.submit("owner", False, gpu=2)
    sim.step()
    sim.release_preempting()
    assert sim.requests[victim].state == RequestState.PENDING and sim.requests[victim].attempt == 1
    sim.step()
    assert sim.requests[owner].state == RequestState.GRANTED
    sim.release(sim.lease_of(owner).id)
    sim.step()
    assert sim.requests[victim].state == RequestState.GRANTED
    assert sim.requests[later].state == RequestState.PENDING


def test_fair_share_preemption_converges_without_flapping() -> None:
    sim = Sim([pool("p", gpu=8, fair_share_preemption=True)], [policy("a", "p"), policy("b", "p")])
    for _ in range(8):
        sim.submit("a", True, gpu=1)
    sim.step()
    for _ in range(8):
        sim.submit("b", True, gpu=1)
    for _ in range(10):
        d = sim.step()
        sim.release_preempting()
        assert all(p.reason == PreemptReason.FAIR_SHARE for p in d.preemptions)
    assert (sim.held("a"), sim.held("b")) == (4, 4)
    quiet = sim.step()
    assert not quiet.preemptions


def test_no_fair_share_preemption_unless_the_pool_enables_it() -> None:
    sim = Sim([pool("p", gpu=8)], [policy("a", "p"), policy("b", "p")])
    for _ in range(8):
        sim.submit("a", True, gpu=1)
    sim.step()
    sim.submit("b", True, gpu=1)
    assert not sim.step().preemptions


def test_spill_over_to_the_second_pool_when_the_first_is_full() -> None:
    sim = Sim(
        [pool("onprem", gpu=2), pool("cloud", gpu=8)],
        [policy("a", "onprem", priority=10), policy("a", "cloud", priority=1)],
    )
    first = sim.submit("a", True, gpu=2)
    second = sim.submit("a", True, gpu=2)
    sim.step()
    assert sim.lease_of(first).pool == "onprem"
    assert sim.lease_of(second).pool == "cloud"


def test_request_limited_to_named_pools() -> None:
    sim = Sim(
        [pool("onprem", gpu=2), pool("cloud", gpu=8)],
        [policy("a", "onprem", priority=10), policy("a", "cloud", priority=1)],
    )
    rid = sim.submit("a", True, gpu=1, pools=["cloud"])
    sim.step()
    assert sim.lease_of(rid).pool == "cloud"
    nowhere = sim.submit("a", True, gpu=1, pools=["elsewhere"])
    sim.step()
    assert "no policy" in sim.rejected[nowhere]


def test_draining_pool_grants_nothing_new() -> None:
    p = pool("p", gpu=4)
    p.draining = True
    sim = Sim([p], [policy("a", "p")])
    rid = sim.submit("a", True, gpu=1)
    sim.step()
    assert sim.requests[rid].wait_reason == WaitReason.POOL_DRAINING


def test_expiry_and_revocation_return_capacity() -> None:
    sim = Sim(
        [pool("p", gpu=2, preemption_grace_s=30)],
        [policy("owner", "p", reserved={"gpu": 2}), policy("g", "p")],
    )
    stale = sim.submit("g", True, gpu=1)
    sim.step()
    sim.now += timedelta(seconds=1)
    slow = sim.submit("g", True, gpu=1)
    sim.step()
    sim.leases[sim.lease_of(stale).id].expires_at = sim.now + timedelta(seconds=5)
    owner = sim.submit("owner", False, gpu=1)
    first = sim.step()
    assert first.preemptions[0].lease_ids == (sim.lease_of(slow).id,)
    sim.now += timedelta(seconds=31)
    slow_lease = sim.lease_of(slow)
    slow_lease.expires_at = sim.now + timedelta(seconds=10)  # its holder still heartbeats
    d = sim.step()
    assert [e.lease_id for e in d.expiries] == [sim.lease_of(stale).id]
    assert d.revocations == [] and [o.lease_id for o in d.overdue] == [slow_lease.id]
    assert sim.requests[owner].state == RequestState.GRANTED, "on the capacity the expiry returned"
    assert slow_lease.state == RequestState.PREEMPTING, "an overdue lease keeps its capacity"
    later = sim.submit("owner", False, gpu=1)
    d = sim.step()
    assert sim.requests[later].state == RequestState.PENDING
    sim.now += timedelta(seconds=5)
    d = sim.step()
    assert d.overdue == [] and d.revocations == [], "overdue once; its holder is not silent yet"
    sim.now += timedelta(seconds=5)
    d = sim.step()
    assert [r.lease_id for r in d.revocations] == [slow_lease.id], "silent for its TTL: taken for gone"
    assert sim.requests[later].state == RequestState.GRANTED


def test_wait_messages_never_show_negative_amounts() -> None:
    # The subject's non-preemptible use already exceeds its reserved share (the policy shrank since).
    sim = Sim([pool("p", gpu=4)], [policy("a", "p", reserved={"gpu": 3})])
    sim.submit("a", False, gpu=3)
    sim.step()
    sim.policies = [policy("a", "p", reserved={"gpu": 1})]
    sim.submit("a", False, gpu=1)
    d = sim.step()
    (wait,) = d.waits
    assert wait.reason == WaitReason.RESERVED_SHARE
    assert "gpu 0 of its reserved share free" in wait.message and "gpu -" not in wait.message


def test_a_waiter_names_the_lease_it_waits_for_and_says_when_it_became_overdue() -> None:
    """ZenML E16 with a victim that does not let go: the owner's reason names the lease; once the lease is
    overdue it says since when, and the owner keeps waiting until the lease ends."""
    sim = Sim(
        [pool("p", gpu=2, preemption_grace_s=30)],
        [policy("owner", "p", reserved={"gpu": 2}, priority=100), policy("g", "p")],
    )
    held = sim.submit("g", True, gpu=2)
    sim.step()
    victim = sim.lease_of(held)
    victim.expires_at = sim.now + timedelta(hours=1)  # its holder heartbeats all along
    owner = sim.submit("owner", False, gpu=2)
    d = sim.step()
    (wait,) = [w for w in d.waits if w.request_id == owner]
    assert wait.reason == WaitReason.PREEMPTING
    assert wait.message == f"waiting for preempted lease {victim.id} to be released"

    sim.now += timedelta(seconds=31)
    d = sim.step()
    assert [o.lease_id for o in d.overdue] == [victim.id] and victim.overdue_since == sim.now
    d = sim.step()
    (wait,) = [w for w in d.waits if w.request_id == owner]
    assert f"{victim.id} overdue since {sim.now.isoformat(timespec='seconds')}" in wait.message
    assert sim.requests[owner].state == RequestState.PENDING, "the overdue lease keeps the GPUs"
    sim.release(victim.id)
    sim.step()
    assert sim.requests[owner].state == RequestState.GRANTED
