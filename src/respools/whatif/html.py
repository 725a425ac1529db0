"""The what-if report as one self-contained HTML file: charts drawn by matplotlib as inline SVG and
the tables as HTML, so the file opens anywhere, offline, and fetches nothing when viewed."""

from __future__ import annotations

import html
import io
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from respools.whatif.report import SUBJECT_COLUMNS, Figures, subject_cells

if TYPE_CHECKING:
    from matplotlib.axes import Axes


def write_report(path: Path, trace_name: str, runs: Sequence[Figures]) -> None:
    try:
        import matplotlib
    except ImportError:  # pragma: no cover - the report extra is part of every install the project makes
        raise SystemExit("the HTML report needs matplotlib: pip install 'respools[report]'") from None
    matplotlib.use("svg")
    sections = [
        _chart(_utilization_chart, runs),
        _chart(_waits_chart, runs),
        _chart(_hours_chart, runs),
        _pools_table(runs),
        _subjects_table(runs),
    ]
    title = f"respools what-if: {html.escape(trace_name)}"
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    body = "\n".join(sections)
    path.write_text(
        f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem; color: #1d2433; }}
table {{ border-collapse: collapse; margin: 1rem 0 2rem; font-size: 0.8rem; }}
th, td {{ border-bottom: 1px solid #d8dde6; padding: 0.3rem 0.7rem; text-align: right; }}
th:first-child, td:first-child, th:nth-child(2), td:nth-child(2) {{ text-align: left; }}
figure {{ margin: 1rem 0; }} svg {{ max-width: 100%; height: auto; }}
</style></head><body>
<h1>{title}</h1>
<p>Generated {stamp}. Each definitions file replays the same trace through respools' scheduling core on a
simulated clock; the reference is a work-conserving scheduler that ignores every policy.</p>
{body}
</body></html>
""",
        encoding="utf-8",
    )


def _chart(draw: Callable[[Axes, Sequence[Figures]], str], runs: Sequence[Figures]) -> str:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 3.6), layout="constrained")
    axes = figure.add_subplot()
    caption = draw(axes, runs)
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg")
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg") :]  # drop the XML prolog and doctype: the SVG sits inside HTML
    return f"<figure>{svg}<figcaption>{html.escape(caption)}</figcaption></figure>"


def _bars(axes: Axes, labels: list[str], series: dict[str, list[float]], *, stacked: bool = False) -> None:
    width = 0.8 / (1 if stacked else max(len(series), 1))
    bottoms = [0.0] * len(labels)
    for index, (name, values) in enumerate(series.items()):
        offsets = [i + (0 if stacked else (index - (len(series) - 1) / 2) * width) for i in range(len(labels))]
        axes.bar(offsets, values, width, label=name, bottom=bottoms if stacked else None)
        if stacked:
            bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    axes.set_xticks(
        range(len(labels)), labels, rotation=30 if len(labels) > 4 else 0, ha="right" if len(labels) > 4 else "center"
    )
    axes.legend(fontsize="small")


def _utilization_chart(axes: Axes, runs: Sequence[Figures]) -> str:
    labels = [f"{run.label}\n{pool.pool}" for run in runs for pool in run.pools]
    series = {
        "respools": [100 * pool.utilization for run in runs for pool in run.pools],
        "work-conserving reference": [100 * pool.reference_utilization for run in runs for pool in run.pools],
    }
    _bars(axes, labels, series)
    axes.set_ylabel("utilization, %")
    return "GPU utilization per pool, against what a work-conserving scheduler keeps busy in the same window."


def _waits_chart(axes: Axes, runs: Sequence[Figures]) -> str:
    subjects = sorted({s.subject for run in runs for s in run.subjects if s.jobs})
    series = {}
    for run in runs:
        by_name = {s.subject: s for s in run.subjects}
        series[f"{run.label} p50"] = [by_name[n].wait_p50_s / 60 if n in by_name else 0.0 for n in subjects]
        series[f"{run.label} p95"] = [by_name[n].wait_p95_s / 60 if n in by_name else 0.0 for n in subjects]
    _bars(axes, subjects, series)
    axes.set_ylabel("wait, minutes")
    return "Time each subject's steps spent waiting (queued, and queued again after a preemption): p50 and p95."


def _hours_chart(axes: Axes, runs: Sequence[Figures]) -> str:
    labels = [f"{run.label}\n{s.subject}" for run in runs for s in run.subjects if s.jobs]
    rows = [s for run in runs for s in run.subjects if s.jobs]
    series = {
        "in share": [s.in_share_gpu_h for s in rows],
        "borrowed": [s.borrowed_gpu_h for s in rows],
        "lost to preemption": [s.lost_gpu_h for s in rows],
    }
    _bars(axes, labels, series, stacked=True)
    axes.set_ylabel("GPU-hours")
    return "GPU-hours held by each subject, within its reserved share and borrowed, and the work preemption threw away."


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    header = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{header}</tr></thead><tbody>{body}</tbody></table>"


def _pools_table(runs: Sequence[Figures]) -> str:
    rows = [
        [
            run.label,
            pool.pool,
            f"{pool.gpus:g}",
            f"{pool.utilization:.1%}",
            f"{pool.reference_utilization:.1%}",
            "-" if pool.of_reference is None else f"{pool.of_reference:.1%}",
        ]
        for run in runs
        for pool in run.pools
    ]
    head = ("definitions", "pool", "GPUs", "utilization", "reference", "of reference")
    return "<h2>Pools</h2>" + _table(head, rows)


def _subjects_table(runs: Sequence[Figures]) -> str:
    rows = [[run.label, *subject_cells(s)] for run in runs for s in run.subjects]
    return "<h2>Subjects</h2>" + _table(("definitions", *SUBJECT_COLUMNS), rows)
