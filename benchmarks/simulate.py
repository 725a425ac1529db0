"""How long ``respools simulate`` takes for a fleet and a week, and how close it keeps the fleet busy.

It generates the synthetic trace (``respools trace generate``'s generator), replays it against a
definitions file (default: ``examples/whatif/borrow-everywhere.yaml``, where every team may borrow the
whole fleet), and prints the replay's wall time, cycles, CPU instructions (``perf_counter`` is noisy on
this VM; with ``--instructions`` the same replay also runs under ``valgrind --tool=cachegrind`` on a
smaller trace of the same shape, for a figure that does not move with load), and the utilization
against the work-conserving reference.

    python benchmarks/simulate.py                      # 1,000 GPUs, 100,000 steps, 7 days: a table
    python benchmarks/simulate.py --jobs 10000 --json  # one JSON object
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from respools.definitions.document import load_definitions
from respools.definitions.source import Source
from respools.whatif.reference import work_conserving
from respools.whatif.replay import ReplayOptions, replay
from respools.whatif.report import figures
from respools.whatif.synthetic import SyntheticSpec, generate
from respools.whatif.trace import write_trace

WEEK_CYCLE_S = 60.0
"""The grid the week is measured on: a 10 s grid (the CLI's default) costs about three times as long."""
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "whatif"
_VALGRIND = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]


def measure(
    gpus: int, jobs: int, days: float, definitions: Path, cycle_s: float, preemptible_share: float
) -> dict[str, float | int | None]:
    trace = generate(SyntheticSpec(gpus=gpus, jobs=jobs, days=days, preemptible_share=preemptible_share))
    doc = load_definitions(Source.read(definitions))
    began, began_cpu = time.perf_counter(), time.process_time()
    run = replay(trace, doc.pools, doc.policies, doc.reservations, options=ReplayOptions(cycle_s=cycle_s))
    replay_s = time.perf_counter() - began
    replay_cpu_s = time.process_time() - began_cpu  # one core's time: what the goal is about on a shared VM
    reference = work_conserving(trace, doc.pools, doc.policies)
    out = figures(run, reference, trace[-1].submit_s)
    return {
        "gpus": gpus,
        "jobs": jobs,
        "days": days,
        "cycle_s": cycle_s,
        "preemptible_share": preemptible_share,
        "replay_s": round(replay_s, 2),
        "replay_cpu_s": round(replay_cpu_s, 2),
        "cycles": run.cycles,
        "ms_per_cycle": round(1000 * replay_s / max(run.cycles, 1), 3),
        "utilization": round(out.utilization, 4),
        "reference_utilization": round(out.reference_utilization, 4),
        "of_reference": round(out.utilization / out.reference_utilization, 4) if out.reference_utilization else 0,
    }


def instructions(gpus: int, jobs: int, days: float, definitions: Path, cycle_s: float) -> int | None:
    """Instructions of the replay alone (trace generated and written beforehand, so not counted twice:
    the child's count minus the same child stopping before the replay)."""
    if shutil.which("valgrind") is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.jsonl"
        write_trace(generate(SyntheticSpec(gpus=gpus, jobs=jobs, days=days)), trace)
        child = (
            "import sys; from pathlib import Path\n"
            "from respools.definitions.document import load_definitions\n"
            "from respools.definitions.source import Source\n"
            "from respools.whatif.replay import ReplayOptions, replay\n"
            "from respools.whatif.trace import read_trace\n"
            f"jobs = read_trace(Path({str(trace)!r}))\n"
            f"doc = load_definitions(Source.read(Path({str(definitions)!r})))\n"
            f"options = ReplayOptions(cycle_s={cycle_s})\n"
            "if sys.argv[1] == 'run': replay(jobs, doc.pools, doc.policies, options=options)\n"
        )
        counts = []
        for mode in ("run", "skip"):
            done = subprocess.run(
                [*_VALGRIND, sys.executable, "-c", child, mode], capture_output=True, text=True, check=True
            )
            match = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
            assert match, done.stderr[-2000:]
            counts.append(int(match.group(1).replace(",", "")))
        return counts[0] - counts[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--cycle-s", type=float, default=WEEK_CYCLE_S)
    parser.add_argument("--preemptible-share", type=float, default=SyntheticSpec.preemptible_share)
    parser.add_argument("-f", "--definitions", type=Path, default=EXAMPLES / "borrow-everywhere.yaml")
    parser.add_argument("--instructions", action="store_true", help="also count a 5,000-step replay's instructions")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures_ = measure(args.gpus, args.jobs, args.days, args.definitions, args.cycle_s, args.preemptible_share)
    if args.instructions:
        scale = 5_000 / args.jobs
        count = instructions(args.gpus, 5_000, args.days * scale, args.definitions, args.cycle_s)
        figures_["minstr_5000_steps"] = None if count is None else round(count / 1e6, 1)
    if args.json:
        print(json.dumps(figures_))
        return
    table = Table(title=f"respools simulate: {args.definitions.name}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in figures_.items():
        table.add_row(key.replace("_", " "), str(value))
    Console().print(table)


if __name__ == "__main__":
    main()
