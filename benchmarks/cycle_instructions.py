"""Instructions of one scheduling cycle, counted by valgrind: a figure that does not move with the load
on the machine, for comparing two versions of the core where wall time is too noisy to tell.

It builds one size of ``benchmarks/scheduling.py`` (the largest by default), saves both snapshots, then
runs the core under ``valgrind --tool=cachegrind`` once with one cycle and once with two; the
difference is one cycle. Needs valgrind on PATH; takes a minute or two.

    python benchmarks/cycle_instructions.py            # a table
    python benchmarks/cycle_instructions.py --json     # {"steady_minstr": ..., "arrival_minstr": ...}

Two versions of the core settle the same arrival into different steady states when their rules differ;
to compare them on one input, save the snapshots with one and count the other on them:

    python benchmarks/cycle_instructions.py --save /tmp/snapshots.pickle
    PYTHONPATH=/elsewhere/src python benchmarks/cycle_instructions.py --snapshots /tmp/snapshots.pickle
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table
from scheduling import SIZES, build  # the sibling benchmark: run this as a script from anywhere

_VALGRIND = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
_CHILD = """
import gc, pickle, sys
from pydantic import BaseModel
from respools.scheduling import Memory, schedule

def intern_keys(value, seen):
    if id(value) in seen:
        return
    seen.add(id(value))
    items = value.__dict__ if isinstance(value, BaseModel) else value if isinstance(value, dict) else None
    if items is not None:
        fresh = {sys.intern(k) if isinstance(k, str) else k: v for k, v in items.items()}
        items.clear()
        items.update(fresh)
        value = items.values()
    if isinstance(value, (list, tuple, type({}.values()))):
        for item in value:
            intern_keys(item, seen)

gc.disable()  # a full collection lands in whichever cycle crosses its threshold: not one cycle's own cost
snapshots = pickle.load(open(sys.argv[1], "rb"))
seen = set()
for snapshot in snapshots.values():
    for part in (snapshot.pools, snapshot.policies, snapshot.leases, snapshot.requests, snapshot.reservations):
        intern_keys(part, seen)
which, cycles, remembered = sys.argv[2], int(sys.argv[3]), sys.argv[4] == "remembered"
memory, fresh = Memory(), [Memory() for _ in range(cycles)]  # kept: freeing one is no cycle's cost
if remembered:
    schedule(snapshots[which], memory)  # the cycle before, whose memory the counted cycles find
for cycle in range(cycles):
    schedule(snapshots[which], memory if remembered else fresh[cycle])
"""
"""Unpickled models hold fresh copies of their field names as ``__dict__`` keys, not the interned
strings that pydantic's models (and the code's own lookups) use, so every field read would compare
strings; the child interns them again, or it would count some 3% more than the cycle costs."""


def _instructions(snapshots: Path, which: str, cycles: int, remembered: bool) -> int:
    mode = "remembered" if remembered else "new"
    out = subprocess.run(
        [*_VALGRIND, sys.executable, "-c", _CHILD, str(snapshots), which, str(cycles), mode],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ | {"PYTHONHASHSEED": "0"},  # the same dict layouts in every run
    )
    found = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
    if found is None:
        raise RuntimeError(f"valgrind printed no instruction count:\n{out.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object of the figures")
    parser.add_argument("--size", type=int, default=len(SIZES) - 1, help="index into scheduling.SIZES")
    parser.add_argument("--save", type=Path, help="also write the snapshots built here to this file")
    parser.add_argument("--snapshots", type=Path, help="count on the snapshots of this file instead of building")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not on PATH (Debian: apt-get install valgrind)")
    size = SIZES[args.size]
    figures: dict[str, float | str] = {"size": size.label}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "snapshots.pickle"
        if args.snapshots is not None:
            path.write_bytes(args.snapshots.read_bytes())
            figures["size"] = f"{size.label} from {args.snapshots}"
        else:
            arrival, steady, _ = build(size)
            path.write_bytes(pickle.dumps({"steady": steady, "arrival": arrival}))
            if args.save is not None:
                args.save.write_bytes(path.read_bytes())
        _instructions(path, "steady", 0, False)  # writes any stale bytecode, which would count next
        for figure, which, remembered in (
            ("steady_minstr", "steady", True),
            ("first_steady_minstr", "steady", False),
            ("arrival_minstr", "arrival", False),
        ):
            one, two = _instructions(path, which, 1, remembered), _instructions(path, which, 2, remembered)
            figures[figure] = round((two - one) / 1e6, 1)
    if args.json:
        print(json.dumps(figures))
        return
    table = Table(title=f"Instructions of one scheduling cycle, millions ({size.label})")
    for column in ("steady state", "steady, a new leader's first cycle", "arrival (preemption storm)"):
        table.add_column(column, justify="right")
    table.add_row(
        f"{figures['steady_minstr']:,}", f"{figures['first_steady_minstr']:,}", f"{figures['arrival_minstr']:,}"
    )
    Console().print(table)


if __name__ == "__main__":
    main()
