"""The corner rules of DESIGN §2 that issue 23 found wrong, one scenario each: zero limits and
capacities, reclaim counting the waiter's own victims and this cycle's grants and nominations, and
"most recently granted" following the order grants were made."""

from __future__ import annotations

from datetime import timedelta

from respools.model import PreemptReason, RequestState

from .sim import Sim, policy, pool


def test_a_limit_of_zero_forbids_the_key() -> None:
    # DESIGN §2.1: limit{gpu: 0} forbids GPUs; only an absent limit means the pool total.
    sim = Sim([pool("p", gpu=4)], [policy("a", "p", limit={"gpu": 0})])
    asked = sim.submit("a", True, gpu=1)
    sim.step()
    assert sim.requests[asked].state == RequestState.REJECTED
    assert "limited to gpu 0" in sim.rejected[asked]


def test_a_capacity_of_zero_offers_none() -> None:
    # mcpu unmetered is unbounded, but a capacity of 0 meters it and offers none of it.
    sim = Sim([pool("p", gpu=4, mcpu=0)], [policy("a", "p")])
    asked = sim.submit("a", True, gpu=1, mcpu=1000)
    free = sim.submit("a", True, gpu=1)
    sim.step()
    assert sim.requests[asked].state == RequestState.REJECTED
    assert "does not offer 'mcpu'" in sim.rejected[asked]
    assert sim.requests[free].state == RequestState.GRANTED


def test_a_reserved_share_of_zero_is_zero() -> None:
    sim = Sim([pool("p", gpu=4)], [policy("a", "p", reserved={"gpu": 0})])
    asked = sim.submit("a", False, gpu=1)
    sim.step()
    assert sim.requests[asked].state == RequestState.REJECTED


def test_reclaim_counts_the_waiters_own_victims_as_released() -> None:
    # The case: 5 of 6 reserved in use, asking for 4 at higher request priority; its own
    # lease of 3 is among the victims, so after the grant it holds 5 - 3 + 4 = 6: within reserved.
    sim = Sim([pool("p", gpu=8)], [policy("a", "p", reserved={"gpu": 6}), policy("b", "p")])
    sim.submit("a", True, priority=5, gpu=2)
    low = sim.submit("a", True, priority=0, gpu=3)
    sim.step()
    for _ in range(3):
        sim.submit("b", True, gpu=1)
    sim.step()
    assert sim.held("b") == 3
    sim.submit("a", True, priority=3, gpu=4)
    d = sim.step()
    assert len(d.preemptions) == 1
    victims = set(d.preemptions[0].lease_ids)
    assert sim.lease_of(low).id in victims
    assert d.preemptions[0].reason == PreemptReason.RECLAIM
    assert sum(sim.leases[v].resources["gpu"] for v in victims) == 4000  # its 3 and one of b's


def test_reclaim_counts_what_this_cycle_already_nominated() -> None:
    # Four one-GPU waiters of a subject with 2 reserved: two are within reserved, two are not.
    sim = Sim([pool("p", gpu=4)], [policy("owner", "p", reserved={"gpu": 2}), policy("guest", "p")])
    for _ in range(4):
        sim.submit("guest", True, gpu=1)
    sim.step()
    for _ in range(4):
        sim.submit("owner", True, gpu=1)
    d = sim.step()
    assert sum(len(p.lease_ids) for p in d.preemptions) == 2


def test_reclaim_counts_what_this_cycle_already_granted() -> None:
    # One GPU free: the first waiter is granted it, the second reclaims one lease, the third is
    # beyond the reserved share of 2 and preempts nothing.
    sim = Sim([pool("p", gpu=4)], [policy("owner", "p", reserved={"gpu": 2}), policy("guest", "p")])
    for _ in range(3):
        sim.submit("guest", True, gpu=1)
    sim.step()
    for _ in range(3):
        sim.submit("owner", True, gpu=1)
    d = sim.step()
    assert len(d.grants) == 1
    assert sum(len(p.lease_ids) for p in d.preemptions) == 1


def test_most_recently_granted_follows_the_order_grants_were_made() -> None:
    # Four leases granted in one cycle share their timestamp; the last one granted goes first. The
    # request submitted last is granted first here (higher request priority), so id order and grant
    # order disagree.
    sim = Sim([pool("p", gpu=4)], [policy("owner", "p", reserved={"gpu": 2}), policy("guest", "p")])
    ids = [sim.submit("guest", True, priority=p, gpu=1) for p in (0, 0, 0, 1)]
    sim.step()
    order = [g.request_id for g in sim.history[-1].grants]
    assert order[0] == ids[3]
    sim.submit("owner", True, gpu=1)
    d = sim.step()
    # lowest request priority first: among the three of priority 0 the last granted is order[-1].
    assert d.preemptions[0].lease_ids == (sim.lease_of(order[-1]).id,)


def test_a_nominees_reserved_share_is_held_against_its_own_subject() -> None:
    # The owner's non-preemptible waiter preempts for GPUs and holds its mcpu; a later request of the
    # same subject must not take the reserved mcpu share that the nominee will use, or the nominee,
    # once its victims are gone, no longer fits its reserved share and its preemption was for nothing.
    sim = Sim(
        [pool("p", gpu=4, mcpu=8000)],
        [policy("owner", "p", reserved={"gpu": 2, "mcpu": 1000}), policy("guest", "p")],
    )
    for _ in range(4):
        sim.submit("guest", True, gpu=1)
    sim.step()
    nominee = sim.submit("owner", False, priority=5, gpu=2, mcpu=1000)
    later = sim.submit("owner", False, priority=0, mcpu=1000)
    d = sim.step()
    assert d.preemptions and d.preemptions[0].request_id == nominee
    assert sim.requests[later].state == RequestState.PENDING
    sim.release_preempting()
    sim.step()
    assert sim.requests[nominee].state == RequestState.GRANTED


def test_leases_granted_earlier_in_the_cycle_are_preemption_candidates() -> None:
    # vip (higher policy priority, no reserved share) is served first and borrows owner's unused
    # reserved share; owner's in-share waiter comes after it in the same cycle and reclaims. The most
    # recently granted borrowed lease is the one vip got in this cycle, not the one it held before:
    # that grant is withdrawn and owner is granted at once.
    sim = Sim(
        [pool("p", gpu=4)],
        [policy("vip", "p", priority=10), policy("owner", "p", priority=1, reserved={"gpu": 2})],
    )
    for _ in range(3):
        sim.submit("vip", True, gpu=1)
    sim.step()
    older = {lease.id for lease in sim.live("vip")}
    sim.now += timedelta(seconds=1)
    fresh = sim.submit("vip", True, gpu=1)
    waiter = sim.submit("owner", True, gpu=1)
    d = sim.step()
    assert not d.preemptions
    assert {lease.id for lease in sim.live("vip")} == older
    assert sim.requests[waiter].state == RequestState.GRANTED
    assert sim.requests[fresh].state == RequestState.PENDING
    assert sim.requests[fresh].attempt == 0


def test_a_reclaim_that_keeps_the_own_victim_falls_back_to_own_priority() -> None:
    # owner holds its reserved 1 GPU (request priority 0); guest borrows the other. owner's waiter of
    # priority 1 is within reserved only if its own lease goes; the minimal reclaim set takes guest's
    # lease alone, which would leave owner at 2 of 1 reserved: not a reclaim. Planned again without
    # reclaim, it preempts its own lower-priority lease.
    sim = Sim([pool("p", gpu=2)], [policy("guest", "p"), policy("owner", "p", reserved={"gpu": 1})])
    own = sim.submit("owner", True, priority=0, gpu=1)
    sim.submit("guest", True, gpu=1)
    sim.step()
    sim.submit("owner", True, priority=1, gpu=1)
    d = sim.step()
    assert d.preemptions[0].lease_ids == (sim.lease_of(own).id,)
    assert d.preemptions[0].reason == PreemptReason.PRIORITY


def test_a_look_alike_asking_more_of_another_key_may_preempt_where_the_smaller_failed() -> None:
    # Found by the oracle. guest holds its reserved GPU and borrows a token. vip (higher policy
    # priority) asks for the GPU alone: guest borrows no GPU, so nothing may be taken and it waits.
    # vip's next request asks the GPU and two tokens: it lacks tokens too, and guest's lease borrows a
    # token, so that lease may be preempted, which frees the GPU as well. Asking more is not failing
    # alike: "at least as much" brings in the leases that borrow the other key (DESIGN §2.5).
    sim = Sim([pool("p", gpu=1, tok=2)], [policy("vip", "p", priority=1), policy("guest", "p", reserved={"gpu": 1})])
    held = sim.submit("guest", True, gpu=1, tok=1)
    sim.step()
    small = sim.submit("vip", True, gpu=1)
    more = sim.submit("vip", True, gpu=1, tok=2)
    d = sim.step()
    assert [(p.request_id, p.lease_ids) for p in d.preemptions] == [(more, (sim.lease_of(held).id,))]
    assert sim.requests[small].state == RequestState.PENDING


def test_a_look_alike_of_a_failed_request_is_judged_again_once_the_pool_changed() -> None:
    # vip's first request lacks only the GPU, which guest holds within its reserved share: it waits.
    # Then other (same policy priority as vip, same share, submitted between them) takes the last free
    # token, and vip's identical second request now lacks tokens as well: guest's lease borrows one, so
    # it may be preempted. Capacity only shrinks within a cycle, but what a waiter may preempt does not.
    sim = Sim(
        [pool("p", gpu=1, tok=2)],
        [
            policy("vip", "p", priority=1),
            policy("other", "p", priority=1, weight=0.5),
            policy("guest", "p", reserved={"gpu": 1}),
        ],
    )
    held = sim.submit("guest", True, gpu=1, tok=1)
    sim.step()
    first = sim.submit("vip", True, gpu=1, tok=1)
    taker = sim.submit("other", True, tok=1)
    second = sim.submit("vip", True, gpu=1, tok=1)
    d = sim.step()
    assert [g.request_id for g in d.grants] == [taker]
    assert [(p.request_id, p.lease_ids) for p in d.preemptions] == [(second, (sim.lease_of(held).id,))]
    assert sim.requests[first].state == RequestState.PENDING


def test_a_failed_heads_look_alikes_take_their_turn_before_the_subjects_next_request() -> None:
    # DESIGN §2.4: each subject's queue head competes, one request at a time. a's first request (2 GPUs,
    # 1 free) fails; its look-alike is then a's head, and b's request, with the same share after the
    # grant and submitted earlier, comes before it: b is granted the last GPU before a reaches its
    # in-share request. b borrows only a token, so a cannot reclaim that GPU afterwards.
    sim = Sim(
        [pool("p", gpu=3, tok=3)],
        [
            policy("holder", "p", reserved={"gpu": 2}),
            policy("a", "p", reserved={"gpu": 1}),
            policy("b", "p", reserved={"gpu": 1}),
        ],
    )
    sim.submit("holder", False, gpu=2)
    sim.step()
    sim.submit("a", True, gpu=2)  # a's share after the grant: 1 of 3 GPUs borrowed
    b = sim.submit("b", True, gpu=1, tok=1)  # b's: 1 of 3 tokens
    sim.submit("a", True, gpu=2)
    in_share = sim.submit("a", True, gpu=1)
    d = sim.step()
    assert [g.request_id for g in d.grants] == [b]
    assert not d.preemptions
    assert sim.requests[in_share].state == RequestState.PENDING
