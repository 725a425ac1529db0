"""Placement on inventories: whole GPUs, MIG slices, fractions, classes, gangs, fragmentation."""

from __future__ import annotations

import pytest

from respools.model import RequestState, WaitReason
from respools.scheduling import DefinitionError, check_pool, pool_capacity

from .inventory import A100_80, H100, host, mig_host
from .sim import Sim, policy, pool


def test_inventory_derives_gpu_and_mig_capacity() -> None:
    p = pool("p", inventory=[host("a", 2), mig_host("m", ["3g.40gb", "2g.20gb", "2g.20gb"])])
    assert pool_capacity(p) == {"gpu": 2000, "mig.3g.40gb": 1, "mig.2g.20gb": 2}


def test_multi_gpu_request_lands_on_one_host_and_packs_the_fullest() -> None:
    sim = Sim([pool("p", inventory=[host("a", 8), host("b", 4)])], [policy("t", "p")])
    first = sim.submit("t", True, gpu=3)
    sim.step()
    assert sim.lease_of(first).placement.hosts == ["b"]
    second = sim.submit("t", True, gpu=4)
    sim.step()
    assert sim.lease_of(second).placement.hosts == ["a"], "b has only 1 left; a is the only host that fits"
    third = sim.submit("t", True, gpu=1)
    sim.step()
    assert sim.lease_of(third).placement.hosts == ["b"], "the fullest host that still fits"


def test_request_bigger_than_any_host_is_rejected_with_the_reason() -> None:
    sim = Sim([pool("p", inventory=[host("a", 4), host("b", 4)])], [policy("t", "p")])
    rid = sim.submit("t", True, gpu=6)
    sim.step()
    assert "6 whole GPU(s) on one host" in sim.rejected[rid]


def test_fractions_share_one_gpu_up_to_one_whole() -> None:
    sim = Sim([pool("p", inventory=[host("a", 2)])], [policy("t", "p")])
    ids = [sim.submit("t", True, gpu=0.25) for _ in range(4)]
    sim.step()
    uuids = {sim.lease_of(r).placement.items[0].gpu_uuid for r in ids}
    assert uuids == {"GPU-a-0"}, "fractions bin-pack onto the fullest GPU"
    item = sim.lease_of(ids[0]).placement.items[0]
    assert item.milli == 250 and item.memory_mb == 81559 // 4
    whole = sim.submit("t", True, gpu=1)
    extra = sim.submit("t", True, gpu=0.5)
    sim.step()
    assert sim.lease_of(whole).placement.items[0].gpu_uuid == "GPU-a-1"
    assert sim.requests[extra].state == RequestState.PENDING


def test_capacity_but_no_device_waits_as_fragmented() -> None:
    # 0.75 + 0.75 on two GPUs: 0.5 is free in the books, but no GPU has 0.5 left.
    sim = Sim([pool("p", inventory=[host("a", 2)])], [policy("a", "p"), policy("b", "p")])
    for subject in ("a", "b"):
        sim.submit(subject, True, gpu=0.75)
    sim.step()
    rid = sim.submit("b", True, gpu=0.5)
    d = sim.step()
    assert sim.requests[rid].wait_reason == WaitReason.FRAGMENTED
    assert not d.preemptions, "a borrower of equal priority does not preempt"


def test_fragmentation_is_resolved_by_preempting_the_lease_that_frees_a_device() -> None:
    sim = Sim(
        [pool("p", inventory=[host("a", 2)])],
        [policy("owner", "p", reserved={"gpu": 1}), policy("guest", "p")],
    )
    first = sim.submit("guest", True, gpu=0.75)
    sim.step()
    sim.now = sim.now.replace(second=1)
    second = sim.submit("guest", True, gpu=0.75)
    sim.step()
    waiter = sim.submit("owner", True, gpu=0.5)
    d = sim.step()
    assert d.preemptions[0].lease_ids == (sim.lease_of(second).id,)
    sim.release_preempting()
    sim.step()
    granted = sim.lease_of(waiter).placement.items[0].gpu_uuid
    assert granted == sim.leases[f"l{second[1:]}-0"].placement.items[0].gpu_uuid
    assert sim.lease_of(first).state == RequestState.ACTIVE


def test_mig_slices_by_profile_name() -> None:
    sim = Sim([pool("p", inventory=[mig_host("m", ["3g.40gb", "2g.20gb", "2g.20gb"])])], [policy("t", "p")])
    first = sim.submit("t", True, **{"mig__2g.20gb": 1})
    second = sim.submit("t", True, **{"mig__2g.20gb": 1})
    third = sim.submit("t", True, **{"mig__2g.20gb": 1})
    sim.step()
    items = [sim.lease_of(r).placement.items[0] for r in (first, second)]
    assert {i.mig_uuid for i in items} == {"MIG-m-1", "MIG-m-2"}
    assert all(i.mig_profile == "2g.20gb" for i in items)
    assert sim.requests[third].wait_reason == WaitReason.NO_CAPACITY


def test_mig_profile_the_pool_does_not_have_is_rejected() -> None:
    sim = Sim([pool("p", inventory=[mig_host("m", ["3g.40gb"])])], [policy("t", "p")])
    rid = sim.submit("t", True, **{"mig__1g.5gb": 1})
    sim.step()
    assert "does not offer 'mig.1g.5gb'" in sim.rejected[rid]


def test_unknown_mig_profile_for_the_model_is_refused_at_definition() -> None:
    bad = pool("p", inventory=[mig_host("m", ["3g.20gb"])])  # 3g.20gb is an A100-40GB profile
    with pytest.raises(DefinitionError) as err:
        check_pool(bad)
    assert err.value.field == "inventory[0].gpus[0].mig_instances[0].profile"
    assert "a100-80gb" in err.value.message


@pytest.mark.parametrize(
    ("model", "memory_mb", "profile", "ok"),
    [
        ("NVIDIA A100-SXM4-40GB", 40960, "1g.5gb", True),
        ("NVIDIA A100-SXM4-40GB", 40960, "1g.10gb", True),
        ("NVIDIA A100 80GB PCIe", 81920, "7g.80gb", True),
        ("NVIDIA A100 80GB PCIe", 81920, "1g.5gb", False),
        (H100, 81559, "3g.40gb", True),
        (H100, 81559, "3g.47gb", False),
        ("NVIDIA H200", 143771, "3g.71gb", True),
        ("NVIDIA H200", 143771, "3g.40gb", False),
    ],
)
def test_mig_catalogue(model: str, memory_mb: int, profile: str, ok: bool) -> None:
    inventory = [
        {
            "name": "h",
            "gpus": [
                {
                    "uuid": "GPU-0",
                    "index": 0,
                    "model": model,
                    "memory_mb": memory_mb,
                    "mig_enabled": True,
                    "mig_instances": [{"uuid": "MIG-0", "profile": profile}],
                }
            ],
        }
    ]
    if ok:
        check_pool(pool("p", inventory=inventory))
    else:
        with pytest.raises(DefinitionError):
            check_pool(pool("p", inventory=inventory))


def test_gpu_class_and_selectors_choose_matching_devices() -> None:
    inventory = [host("old", 4, A100_80, zone="eu"), host("new", 4, H100, zone="us")]
    sim = Sim([pool("p", inventory=inventory)], [policy("t", "p")])
    h100 = sim.submit("t", True, gpu=1, gpu_class="h100-80gb")
    eu = sim.submit("t", True, gpu=1, selectors={"zone": "eu"})
    family = sim.submit("t", True, gpu=1, gpu_class="a100")
    missing = sim.submit("t", True, gpu=1, gpu_class="l4")
    sim.step()
    assert sim.lease_of(h100).placement.hosts == ["new"]
    assert sim.lease_of(eu).placement.hosts == ["old"]
    assert sim.lease_of(family).placement.hosts == ["old"]
    assert "l4" in sim.rejected[missing]


def test_gang_places_each_replica_on_its_own_host_all_or_nothing() -> None:
    sim = Sim([pool("p", inventory=[host("a", 4), host("b", 4), host("c", 2)])], [policy("t", "p")])
    gang = sim.submit("t", True, gpu=4, replicas=2)
    sim.step()
    lease = sim.lease_of(gang)
    assert lease.placement.hosts == ["a", "b"] and lease.resources["gpu"] == 8000
    second = sim.submit("t", True, gpu=2, replicas=2)
    sim.step()
    assert sim.requests[second].wait_reason == WaitReason.NO_CAPACITY
    too_wide = sim.submit("t", True, gpu=1, replicas=4)
    sim.step()
    assert "× 4 distinct hosts" in sim.rejected[too_wide]


def test_gang_waits_for_devices_even_when_the_total_would_fit() -> None:
    sim = Sim([pool("p", inventory=[host("a", 4), host("b", 4)])], [policy("t", "p")])
    sim.submit("t", True, gpu=3)
    sim.step()
    gang = sim.submit("t", True, gpu=2, replicas=2)
    sim.step()
    assert sim.requests[gang].wait_reason == WaitReason.FRAGMENTED


def test_fraction_on_a_pool_that_cannot_express_it_is_rejected() -> None:
    sim = Sim([pool("p", gpu=8, forms=["whole"])], [policy("t", "p")])
    rid = sim.submit("t", True, gpu=0.5)
    sim.step()
    assert "cannot express GPU fractions" in sim.rejected[rid]
    with pytest.raises(DefinitionError) as err:
        check_pool(pool("q", gpu=2.5, forms=["whole"]))
    assert err.value.field == "capacity.gpu"


def test_mixed_whole_and_fraction_is_rejected() -> None:
    sim = Sim([pool("p", gpu=8)], [policy("t", "p")])
    rid = sim.submit("t", True, gpu=1.5)
    sim.step()
    assert "whole GPUs or a fraction" in sim.rejected[rid]


def test_host_that_left_the_inventory_keeps_its_lease_records() -> None:
    p = pool("p", inventory=[host("a", 2), host("b", 2)])
    sim = Sim([p], [policy("t", "p")])
    on_b = sim.submit("t", True, gpu=2, selectors={})
    sim.step()
    gone = sim.lease_of(on_b).placement.hosts[0]
    sim.pools = [pool("p", inventory=[h for h in (host("a", 2), host("b", 2)) if h["name"] != gone])]
    d = sim.step()
    assert not d.expiries and sim.lease_of(on_b).state == RequestState.ACTIVE
    rid = sim.submit("t", True, gpu=1)
    sim.step()
    assert sim.requests[rid].wait_reason == WaitReason.NO_CAPACITY, "capacity shrank under the live lease"
