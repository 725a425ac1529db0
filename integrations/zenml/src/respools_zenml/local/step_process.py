"""The process that runs one pooled step for the pooled local orchestrator.

``python -m respools_zenml.local.step_process --snapshot-id … --step-name … --orchestrator-run-id …``
launches the step as ZenML's local orchestrator would in its own process (same store, same stack, same
pipeline run), while the pooled orchestrator's component hooks hold the lease around it. Running it in a
process of its own is what lets the orchestrator stop it at the preemption deadline without stopping
itself. The exit status tells the orchestrator how the step ended.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from uuid import UUID

from zenml.client import Client
from zenml.exceptions import RunStoppedException
from zenml.execution.step.utils import launch_step
from zenml.integrations.registry import integration_registry
from zenml.utils import source_utils

from respools_zenml.holding import HOLDER

EXIT_SUCCEEDED = 0
EXIT_FAILED = 1
EXIT_STOPPED = 3
"""The run was stopped: ZenML does not retry such a step, so neither does the orchestrator."""

log = logging.getLogger(__name__)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--snapshot-id", type=UUID)
    parser.add_argument("--step-name")
    parser.add_argument("--orchestrator-run-id")
    parser.add_argument("--source-root", required=True, help="where the pipeline's modules are imported from")
    parser.add_argument(
        "--warm",
        action="store_true",
        help="start ahead: import and open the store, then read the step to run as one JSON line on stdin",
    )
    args = parser.parse_args(argv)
    if not args.warm and None in (args.snapshot_id, args.step_name, args.orchestrator_run_id):
        parser.error("--snapshot-id, --step-name and --orchestrator-run-id are required without --warm")
    return args


def command(snapshot_id: UUID, step_name: str, orchestrator_run_id: str, source_root: str) -> list[str]:
    """How the orchestrator starts this module (with the interpreter it runs on)."""
    return [
        sys.executable,
        "-m",
        __name__,
        "--snapshot-id",
        str(snapshot_id),
        "--step-name",
        step_name,
        "--orchestrator-run-id",
        orchestrator_run_id,
        "--source-root",
        source_root,
    ]


def warm_command(source_root: str) -> list[str]:
    """A step process started ahead of its step (see :mod:`respools_zenml.local.warm`)."""
    return [sys.executable, "-m", __name__, "--warm", "--source-root", source_root]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    source_utils.set_custom_source_root(args.source_root)
    if args.source_root not in sys.path:
        sys.path.insert(0, args.source_root)
    integration_registry.activate_integrations()
    store = Client().zen_store  # opened before the grant when warm
    if args.warm:
        line = sys.stdin.readline()  # the step, once its lease is granted
        if not line:
            return EXIT_SUCCEEDED  # the orchestrator went away without a step for us
        order = json.loads(line)
        os.environ.update(order["env"])
        args.snapshot_id, args.step_name = UUID(order["snapshot_id"]), order["step_name"]
        args.orchestrator_run_id = order["orchestrator_run_id"]
    snapshot = store.get_snapshot(args.snapshot_id, step_configuration_filter=[args.step_name])
    step = snapshot.step_configurations[args.step_name]
    try:
        launch_step(snapshot=snapshot, step=step, orchestrator_run_id=args.orchestrator_run_id, retry=False)
    except RunStoppedException:
        return EXIT_STOPPED
    except BaseException as exc:  # the step failed; ZenML recorded how, the orchestrator decides on retries
        log.error("Step %s failed: %s: %s", args.step_name, type(exc).__name__, exc)
        return EXIT_FAILED
    finally:
        HOLDER.release(step_failed=True)  # only if ZenML never reached cleanup_step_run
    return EXIT_SUCCEEDED


if __name__ == "__main__":
    sys.exit(main())
