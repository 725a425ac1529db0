"""``respools run`` with real child processes: the command gets the lease's environment and its exit status
comes back; on notice its whole process group gets SIGTERM and, if it is still there at the deadline,
SIGKILL; with ``--max-retries`` it runs again, told its attempt, and can resume from its checkpoint."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from respools.model import RequestState
from tests.client.conftest import World, WorldFactory, wait_for
from tests.client.server import SRC

RUN = [sys.executable, "-c", "from respools.cli import app; app()", "run"]


def respools_run(w: World, *args: str, stdout: int | None = subprocess.PIPE) -> subprocess.Popen[str]:
    env = os.environ | {"PYTHONPATH": SRC, "RESPOOLS_URL": w.admin.url, "RESPOOLS_TOKEN": w.token}
    return subprocess.Popen([*RUN, *args], env=env, stdout=stdout, stderr=subprocess.PIPE, text=True)


def live_lease(w: World) -> str:
    leases = wait_for(lambda: w.client.list_leases(live=True, states=None), timeout=30)
    lease_id: str = leases[0].id
    wait_for(lambda: w.client.get_lease(lease_id).state == RequestState.ACTIVE)
    return lease_id


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes: it holds nothing
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_the_command_gets_the_lease_environment_and_its_exit_status_comes_back(world: WorldFactory) -> None:
    w = world(gpus=2)
    command = "import os, sys; print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ['RESPOOLS_ATTEMPT']); sys.exit(3)"
    run = respools_run(w, "--gpu", "2", "--pool", w.pool, "--", sys.executable, "-c", command)
    out, err = run.communicate(timeout=60)
    assert run.returncode == 3, err
    devices, attempt = out.split()
    suffix = w.pool.removeprefix("pool-")
    assert devices == f"GPU-{suffix}-0,GPU-{suffix}-1" and attempt == "0"
    (lease,) = w.client.list_leases()
    assert lease.state == RequestState.RELEASED


STUBBORN = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    marks = sys.argv[1]
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(marks + "/worker", "w") as f:
        f.write(str(worker.pid))

    def on_term(signum, frame):
        with open(marks + "/term", "w") as f:
            f.write(repr(time.time()))

    signal.signal(signal.SIGTERM, on_term)
    with open(marks + "/ready", "w") as f:
        f.write("1")
    while True:
        time.sleep(0.05)
    """
)


def test_preemption_reaches_the_command_as_sigterm_then_sigkill_at_the_deadline(
    world: WorldFactory, tmp_path: Path
) -> None:
    w = world({"gpu": 1})
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    run = respools_run(w, "--gpu", "1", "--preemptible", "--", sys.executable, str(script), str(tmp_path))
    try:
        lease_id = live_lease(w)
        wait_for(lambda: (tmp_path / "ready").exists(), timeout=30)
        w.admin.preempt_lease(lease_id, grace_s=1.5)
        _, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    ended = time.time()
    assert run.returncode == 128 + 9, err
    termed = float((tmp_path / "term").read_text())
    assert 1.0 < ended - termed < 10, "SIGKILL came at the deadline, after SIGTERM"
    worker = int((tmp_path / "worker").read_text())
    wait_for(lambda: not alive(worker), timeout=5)  # the whole group went
    assert "SIGTERM to process group" in err and "SIGKILL" in err
    assert w.client.get_lease(lease_id).state == RequestState.PREEMPTED


CHECKPOINTING = textwrap.dedent(
    """
    import os, signal, sys, time
    checkpoint = sys.argv[1]
    attempt = int(os.environ["RESPOOLS_ATTEMPT"])
    step = int(open(checkpoint).read()) if attempt else 0
    print(f"attempt {attempt} from {step}", flush=True)

    def on_term(signum, frame):
        open(checkpoint, "w").write(str(step))
        sys.exit(143)

    signal.signal(signal.SIGTERM, on_term)
    if attempt == 0:
        open(checkpoint + ".ready", "w").write("1")
    while step < 300 or attempt == 0:
        step += 1
        time.sleep(0.002)
    """
)


def test_a_preempted_command_is_rerun_and_resumes_from_its_checkpoint(world: WorldFactory, tmp_path: Path) -> None:
    w = world({"gpu": 1}, grace_s=10)
    script, checkpoint = tmp_path / "train.py", tmp_path / "checkpoint"
    script.write_text(CHECKPOINTING)
    run = respools_run(
        w,
        "--gpu",
        "1",
        "--preemptible",
        "--max-retries",
        "2",
        "--retry-backoff",
        "0.05",
        "--",
        sys.executable,
        str(script),
        str(checkpoint),
    )
    try:
        lease_id = live_lease(w)
        wait_for(lambda: Path(f"{checkpoint}.ready").exists(), timeout=30)
        time.sleep(0.1)
        w.admin.preempt_lease(lease_id)
        out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, err
    saved = int(checkpoint.read_text())
    assert out.splitlines() == ["attempt 0 from 0", f"attempt 1 from {saved}"]
    assert saved > 0
    (request,) = w.client.list_requests()
    assert (request.state, request.attempt) == (RequestState.RELEASED, 1)


def test_a_signal_to_respools_run_reaches_the_command_and_ends_the_run(world: WorldFactory, tmp_path: Path) -> None:
    w = world({"gpu": 1})
    command = "import signal, sys, time; signal.signal(signal.SIGINT, lambda *a: sys.exit(7)); time.sleep(60)"
    run = respools_run(w, "--gpu", "1", "--max-retries", "3", "--", sys.executable, "-c", command)
    try:
        lease_id = live_lease(w)
        time.sleep(0.5)  # the child installed its handler
        run.send_signal(2)
        _, err = run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 7, err
    assert w.client.get_lease(lease_id).state == RequestState.RELEASED


def test_a_command_that_cannot_start_exits_127_and_releases_the_lease(world: WorldFactory, tmp_path: Path) -> None:
    w = world({"gpu": 1})
    run = respools_run(w, "--gpu", "1", "--", str(tmp_path / "no-such-command"))
    _, err = run.communicate(timeout=60)
    assert run.returncode == 127 and "cannot run" in err
    (lease,) = w.client.list_leases()
    assert lease.state == RequestState.RELEASED
