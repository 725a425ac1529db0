"""The dashboard's pure parts: accounting, the GPU map, chart and timeline geometry, sessions, the
sampled history — each checked on small hand-made inputs whose answers are known."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from respools.model import Gpu as GpuModel
from respools.model import (
    Host,
    Lease,
    MigInstance,
    Placement,
    PlacementItem,
    Policy,
    PoolSpec,
    RequestState,
    Reservation,
    Resources,
)
from respools.server.dashboard import formatting
from respools.server.dashboard.charts import BOTTOM, HEIGHT, Layer, nice_ceiling, step_chart, value_at
from respools.server.dashboard.gpumap import Holder, build_gpu_map
from respools.server.dashboard.session import SessionCodec
from respools.server.dashboard.timeline import build_timeline
from respools.server.dashboard.usage import Holding, pool_usage
from respools.server.dashboard.utilization import PoolInputs, pool_series, team_series, utilization
from respools.server.usage import Interval

NOW = datetime(2025, 3, 4, 12, 0, tzinfo=UTC)


def gpu(uuid: str, index: int, mig: list[str] | None = None) -> GpuModel:
    instances = [MigInstance(uuid=f"{uuid}-m{i}", profile=p) for i, p in enumerate(mig or [])]
    return GpuModel(
        uuid=uuid,
        index=index,
        model="NVIDIA A100-SXM4-80GB",
        memory_mb=81920,
        mig_enabled=bool(mig),
        mig_instances=instances,
    )


def pool_spec() -> PoolSpec:
    return PoolSpec(
        name="p",
        inventory=[Host(name="n1", gpus=[gpu("G0", 0), gpu("G1", 1), gpu("G2", 2, ["3g.40gb", "3g.40gb"])])],
    )


def lease(lease_id: str, subject: str, items: list[PlacementItem], state: RequestState = RequestState.ACTIVE) -> Lease:
    return Lease(
        id=lease_id,
        request_id="req_" + lease_id,
        subject=subject,
        pool="p",
        stack="local",
        resources=Resources({"gpu": sum(i.milli for i in items if i.mig_uuid is None)}),
        placement=Placement(items=items),
        state=state,
        preemptible=True,
        labels={"pipeline": "train", "step": "fit"},
        granted_at=NOW,
        expires_at=NOW + timedelta(minutes=1),
    )


def item(gpu_uuid: str, index: int, milli: int = 1000, mig: str | None = None) -> PlacementItem:
    return PlacementItem(
        host="n1",
        gpu_uuid=gpu_uuid,
        gpu_index=index,
        milli=milli,
        mig_uuid=mig,
        mig_profile="3g.40gb" if mig else None,
    )


def holder(lease: Lease) -> Holder:
    hidden = lease.subject == "hidden"
    return Holder(None if hidden else lease.id, None if hidden else lease.subject, lease.state, lease.subject, 0)


# ---- formatting -----------------------------------------------------------------------------------


def test_amounts_read_in_wire_units() -> None:
    assert formatting.amount("gpu", 1500) == "1.5"
    assert formatting.amount("gpu", 250) == "0.25"
    assert formatting.amount("gpu", 3000) == "3"
    assert formatting.amount("memory_mb", 65536) == "65,536"
    assert formatting.vector({"step_run": 1, "mcpu": 4000, "gpu": 500}) == "gpu 0.5 · mcpu 4,000"
    assert formatting.duration(59) == "59 s"
    assert formatting.duration(61) == "1 m 01 s"
    assert formatting.duration(3 * 3600 + 5 * 60) == "3 h 05 m"
    assert formatting.primary_key({"mcpu": 8000, "mig.3g.40gb": 2, "gpu": 0}) == "mig.3g.40gb"
    assert formatting.primary_key({"mcpu": 8000, "gpu": 4000}) == "gpu"
    assert formatting.step_labels({"step": "fit", "pipeline": "train", "user": "ana"}) == "train / fit · user=ana"


def test_placement_reads_per_host() -> None:
    items = [item("G1", 1), item("G0", 0, milli=250), item("G2", 2, mig="G2-m0")]
    assert formatting.placement(items) == "n1: 0.25 of GPU 0, GPU 1, MIG 3g.40gb on GPU 2"


# ---- usage ----------------------------------------------------------------------------------------


def test_pool_usage_splits_in_share_borrowed_and_free_like_the_scheduler() -> None:
    policies = [
        Policy(subject="a", pool="p", reserved={"gpu": 1}, limit={"gpu": 2}, priority=5),
        Policy(subject="b", pool="p", reserved={"gpu": 1}),
    ]
    reservations = [
        Reservation(
            id="r1",
            subject="b",
            pool="p",
            resources={"gpu": 1},
            start=NOW - timedelta(hours=1),
            end=NOW + timedelta(hours=1),
        ),
        Reservation(
            id="r2",
            subject="a",
            pool="p",
            resources={"gpu": 1},
            start=NOW + timedelta(hours=1),
            end=NOW + timedelta(hours=2),
        ),
    ]
    holdings = [
        Holding("p", "a", {"gpu": 1000, "step_run": 1}, {}),
        Holding("p", "a", {"gpu": 1000, "step_run": 1}, {"gpu": 1000}),
        Holding("other", "a", {"gpu": 1000}, {}),
    ]
    usage = pool_usage(pool_spec(), policies, reservations, holdings, NOW)
    assert usage.capacity == {"gpu": 2000, "mig.3g.40gb": 2}
    assert (usage.in_share("gpu"), usage.borrowed["gpu"], usage.free("gpu")) == (1000, 1000, 0)
    a, b = usage.teams
    assert (a.subject, a.in_share("gpu"), a.borrowed["gpu"], a.reserved, a.limit["gpu"]) == (
        "a",
        1000,
        1000,
        {"gpu": 1000},
        2000,
    )
    assert a.limit["mig.3g.40gb"] == 2  # a key the limit does not name is capped by the pool's total
    assert (b.reserved, b.limit["gpu"], b.in_use) == ({"gpu": 2000}, 2000, {})  # the active reservation adds
    assert usage.keys == ["gpu", "mig.3g.40gb"]


# ---- the GPU map ----------------------------------------------------------------------------------


def test_gpu_map_shows_whole_fraction_and_mig_holders() -> None:
    leases = [
        lease("l1", "a", [item("G0", 0)]),
        lease("l2", "b", [item("G1", 1, milli=500)]),
        lease("l3", "hidden", [item("G1", 1, milli=250)], RequestState.PREEMPTING),
        lease("l4", "a", [item("G2", 2, mig="G2-m1")]),
        lease("l5", "a", [PlacementItem(host="gone", gpu_uuid="G9", gpu_index=0)]),
    ]
    gpu_map = build_gpu_map(pool_spec(), None, leases, holder)
    assert gpu_map is not None
    (host,) = gpu_map.hosts
    whole, shared, mig = host.gpus
    assert [s.holder.lease_id for s in whole.segments] == ["l1"] and whole.summary == ""
    assert [(s.start, s.milli, s.holder.subject) for s in shared.segments] == [(0, 500, "b"), (500, 250, None)]
    assert shared.summary == "shared · 0.75 of 1 held"
    assert [slot.holder.lease_id if slot.holder else None for slot in mig.slots] == [None, "l4"]
    assert mig.summary == "MIG · 1 of 2 instances held"
    assert [(i.gpu_uuid, h.lease_id) for i, h in gpu_map.stray] == [("G9", "l5")]
    assert {h.subject for h in gpu_map.legend} == {"a", "b", None}


def test_gpu_map_marks_hosts_that_stopped_reporting() -> None:
    gpu_map = build_gpu_map(pool_spec(), set(), [], holder)
    assert gpu_map is not None and not gpu_map.hosts[0].live
    assert build_gpu_map(PoolSpec(name="p", capacity={"gpu": 4}), None, [], holder) is None


# ---- charts ---------------------------------------------------------------------------------------


def test_value_at_and_nice_ceiling() -> None:
    series = [(10.0, 1.0), (20.0, 3.0)]
    assert value_at(series, 5) is None and value_at(series, 10) == 1.0 and value_at(series, 25) == 3.0
    assert [nice_ceiling(v) for v in (0.7, 1.0, 7.0, 10.5, 2300)] == [0.8, 1.0, 8.0, 12.0, 2500.0]


def test_step_chart_stacks_borrowed_on_in_share() -> None:
    in_share = [(0.0, 2000.0), (50.0, 3000.0)]
    borrowed = [(0.0, 0.0), (60.0, 1000.0)]
    capacity = [(0.0, 4000.0)]
    chart = step_chart(
        "p",
        "gpu",
        0.0,
        100.0,
        [Layer("area-share", "in share", in_share), Layer("area-borrowed", "borrowed", borrowed)],
        [Layer("line-capacity", "capacity", capacity)],
    )
    assert [tick.label for tick in chart.y_ticks] == ["0", "2.5", "5"]  # 4 GPUs with headroom: axis to 5
    share_area, borrowed_area = chart.areas
    plot = HEIGHT - BOTTOM - 10.0

    def y(gpus: float) -> float:
        return round(HEIGHT - BOTTOM - gpus / 5 * plot, 2)

    assert f",{y(3)}" in share_area.d and f",{y(4)}" in borrowed_area.d  # 3 in share, 3 + 1 on top
    assert f",{y(4)}" not in share_area.d
    assert chart.lines[0].d.count(f",{y(4)}") == 2  # the capacity line holds at 4 across the window
    empty = step_chart("p", "gpu", 0.0, 100.0, [Layer("area-share", "in share", [])])
    assert empty.empty and not empty.x_ticks


# ---- reservations timeline ------------------------------------------------------------------------


def test_timeline_places_active_and_upcoming_windows() -> None:
    active = Reservation(
        id="r1",
        subject="a",
        pool="p",
        resources={"gpu": 1},
        start=NOW - timedelta(hours=3),
        end=NOW + timedelta(hours=2),
    )
    later = Reservation(
        id="r2",
        subject="b",
        pool="p",
        resources={"gpu": 2},
        start=NOW + timedelta(hours=30),
        end=NOW + timedelta(hours=40),
    )
    timeline = build_timeline([later, active], NOW)
    first, second = timeline.bars
    assert first.reservation.id == "r1" and first.active and first.cut_start and first.x == timeline.left
    assert not second.active and not second.cut_end and second.x > timeline.now_x
    assert [row.label for row in timeline.rows] == ["p · a", "p · b"]
    assert timeline.end == NOW + timedelta(hours=40)


# ---- sessions -------------------------------------------------------------------------------------


def test_session_cookies_are_signed_expire_and_bind_the_csrf_token() -> None:
    codec = SessionCodec(b"k" * 32, lifetime_s=60)
    session = codec.issue("tok_1", now=1000.0)
    assert codec.verify(session.value, now=1059.0) == session
    assert codec.verify(session.value, now=1060.0) is None
    assert SessionCodec(b"x" * 32, 60).verify(session.value, now=1000.0) is None
    assert codec.verify(session.value.replace("tok_1", "tok_2"), now=1000.0) is None
    other = codec.issue("tok_1", now=1000.0)
    assert codec.check_csrf(session, codec.csrf_token(session))
    assert not codec.check_csrf(session, codec.csrf_token(other)) and not codec.check_csrf(session, None)


# ---- history --------------------------------------------------------------------------------------


def _span(subject: str, gpus: int, borrowed: int, start_s: float, end_s: float) -> Interval:
    return Interval(
        subject=subject,
        pool="p",
        resources={"gpu": gpus},
        borrowed={"gpu": borrowed} if borrowed else {},
        start=NOW + timedelta(seconds=start_s),
        end=NOW + timedelta(seconds=end_s),
        preempted=False,
    )


def test_utilization_series_are_step_sums_of_the_lease_intervals() -> None:
    """Held from grant to release, clipped to the window: a lease from before the window counts from its
    start, one still live at its end holds on; in share and borrowed split as the grant recorded."""
    policies = [Policy(subject="a", pool="p", reserved={"gpu": 1})]
    start = Reservation(id="r1", subject="a", pool="p", resources={"gpu": 1}, start=NOW + timedelta(seconds=50),
                        end=NOW + timedelta(seconds=70))  # fmt: skip
    usage = pool_usage(pool_spec(), policies, [start], [Holding("p", "a", {"gpu": 2000}, {"gpu": 1000})], NOW)
    spans = [
        _span("a", 1000, 0, -50, 30),  # from before the window
        _span("a", 2000, 1000, 20, 500),  # live past the window's end
        _span("b", 1000, 0, 200, 300),  # after the window
    ]
    t0 = NOW.timestamp()
    series = utilization([PoolInputs(usage, "gpu", policies, [start])], spans, NOW, NOW + timedelta(seconds=100))
    pool = pool_series("p", "gpu")
    assert series.series(pool, "in_share") == [(t0, 1000.0), (t0 + 20, 2000.0), (t0 + 30, 1000.0)]
    assert series.series(pool, "borrowed") == [(t0, 0.0), (t0 + 20, 1000.0)]
    team = team_series("p", "a", "gpu")
    assert series.series(team, "reserved") == [(t0, 1000.0), (t0 + 50, 2000.0), (t0 + 70, 1000.0)]
    assert series.series(team, "limit") == [(t0, 2000.0)]
    assert series.window_s == 100


@pytest.mark.parametrize("model", ["NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"])
def test_gpu_model_drops_the_vendor(model: str) -> None:
    assert formatting.gpu_model(model) == "A100-SXM4-80GB"
