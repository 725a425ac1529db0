"""The two teams' pipeline steps in the demo, written the way a data scientist would write them.

* research's ``train`` asks for 3 GPUs, preemptible, with retries: it gets its 1 reserved GPU and borrows
  2 idle ones. When prod needs its reserved share back, ``LeasePreempted`` arrives in the step; the step
  writes a checkpoint and lets the exception go, the request goes back to its place in the queue, and
  the step runs again from the checkpoint once capacity frees up.
* prod's ``batch-score`` asks for 2 GPUs, not preemptible: they are within prod's reserved share, so the
  scheduler reclaims them from research's borrowed lease.

Each step runs in its own thread with its own token, as two pipelines would on two machines.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

import respools
from respools.client import Client, LeasePreempted, LeaseSession

POOL = "demo-gpus"
EPOCHS = 8
EPOCH_S = 0.5
PROD_STARTS_AFTER_EPOCH = 3
PROD_WORK_S = 3.0


class Narrator:
    """Prints what happens, as it happens, with the time since the workloads started."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.started = time.monotonic()
        self._lock = threading.Lock()

    def __call__(self, who: str, message: str, style: str = "") -> None:
        elapsed = time.monotonic() - self.started
        text = escape(message)
        with self._lock:
            self.console.print(
                f"[dim]{elapsed:5.1f}s[/dim]  [bold]{who:<22}[/bold] "
                + (f"[{style}]{text}[/{style}]" if style else text),
                soft_wrap=True,
            )


@dataclass
class StepRecord:
    """What one step went through, for the summary and for the demo's own check."""

    team: str
    step: str
    asked: str
    attempts: int = 0
    borrowed_gpus: float = 0.0
    preemptions: list[str] = field(default_factory=list)
    resumed_from: int | None = None
    result: str = "did not finish"
    lease_ids: list[str] = field(default_factory=list)
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "team": self.team,
            "step": self.step,
            "asked": self.asked,
            "attempts": self.attempts,
            "borrowed_gpus": self.borrowed_gpus,
            "preemptions": self.preemptions,
            "resumed_from": self.resumed_from,
            "result": self.result,
            "lease_ids": self.lease_ids,
            "error": self.error,
        }


def _devices(lease: LeaseSession) -> str:
    return lease.env.get("CUDA_VISIBLE_DEVICES", "-")


def research_train(
    url: str, token: str, workdir: Path, say: Narrator, record: StepRecord, underway: threading.Event
) -> None:
    """Fine-tune for EPOCHS epochs on 3 GPUs, surviving a preemption through its checkpoint."""
    who = "research/train"
    checkpoint = workdir / "train-checkpoint.json"
    client = Client(url, token)

    def granted(lease: LeaseSession) -> None:
        record.attempts += 1
        record.lease_ids.append(lease.id)
        borrowed = float(lease.lease.borrowed.get("gpu", 0)) / 1000
        record.borrowed_gpus = max(record.borrowed_gpus, borrowed)
        say(who, f"granted {lease.id} (attempt {lease.attempt + 1}): 3 GPUs, {borrowed:g} borrowed; "
            f"CUDA_VISIBLE_DEVICES={_devices(lease)}", "green")  # fmt: skip

    def requeued(lease: LeaseSession) -> None:
        say(who, "requeued at its original place in the queue; waiting for 3 GPUs", "yellow")

    @respools.requires(
        gpu=3,
        pool=POOL,
        preemptible=True,
        max_retries=2,
        retry_backoff_s=0.2,
        labels={"pipeline": "llm-finetune", "run": "demo", "step": "train"},
        client=client,
        progress=False,
        on_granted=granted,
        on_requeued=requeued,
    )
    def train() -> int:
        lease = respools.current_lease()
        epoch = 0
        if lease.attempt > 0 and checkpoint.exists():
            epoch = json.loads(checkpoint.read_text())["epoch"]
            record.resumed_from = epoch
            say(who, f"resuming from the checkpoint at epoch {epoch}", "cyan")
        try:
            while epoch < EPOCHS:
                lease.sleep(EPOCH_S)  # one epoch of "training"; ends early when notice arrives
                epoch += 1
                say(who, f"epoch {epoch}/{EPOCHS}")
                if epoch == PROD_STARTS_AFTER_EPOCH:
                    underway.set()
        except LeasePreempted as notice:
            checkpoint.write_text(json.dumps({"epoch": epoch}))
            reason = notice.reason.value if notice.reason else "unknown"
            record.preemptions.append(reason)
            left = f"{notice.time_left:.0f} s" if notice.time_left is not None else "some time"
            say(who, f"LeasePreempted ({reason}): checkpoint written at epoch {epoch}, {left} before the "
                "deadline; handing the GPUs back", "bold red")  # fmt: skip
            raise
        return epoch

    say(who, "asks for 3 GPUs (preemptible, up to 2 retries)")
    try:
        record.result = f"finished {train()}/{EPOCHS} epochs"
        say(who, record.result, "green")
    except Exception as exc:  # the summary reports it; the demo's check fails on it
        record.error = f"{type(exc).__name__}: {exc}"
        say(who, f"failed: {record.error}", "red")
    finally:
        underway.set()  # never leave prod waiting on a step that failed early
        client.close()


def prod_batch_score(url: str, token: str, say: Narrator, record: StepRecord, underway: threading.Event) -> None:
    """Score a batch on 2 GPUs that prod has reserved; starts once research's training is underway."""
    who = "prod/batch-score"
    underway.wait()
    say(who, "asks for 2 GPUs (not preemptible: within prod's reserved share)")
    client = Client(url, token)
    try:
        with respools.lease(
            gpu=2,
            pool=POOL,
            labels={"pipeline": "nightly-scoring", "run": "demo", "step": "batch-score"},
            client=client,
            progress=False,
        ) as lease:
            record.attempts += 1
            record.lease_ids.append(lease.id)
            say(who, f"granted {lease.id}: 2 GPUs from prod's reserved share; "
                f"CUDA_VISIBLE_DEVICES={_devices(lease)}", "green")  # fmt: skip
            time.sleep(PROD_WORK_S)
        record.result = "scored the batch"
        say(who, "done; released its lease", "green")
    except Exception as exc:
        record.error = f"{type(exc).__name__}: {exc}"
        say(who, f"failed: {record.error}", "red")
    finally:
        client.close()
