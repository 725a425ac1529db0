"""respools for ZenML.

- :func:`step`: ``zenml.step`` that also says what the step asks of the pools (respools keys or ZenML's
  ``ResourceSettings``), how preemptible it is, its priority and its retries;
- the ``respools_local`` and ``respools_kubernetes`` orchestrator flavors (:func:`register_flavors`), which
  lease before a step starts and release when it ends, and honour plain ``ResourceSettings`` too;
- inside a step, ``respools.current_lease()`` and ``respools.LeasePreempted`` work as anywhere, and
  :func:`save_state` / :func:`load_state` / :func:`checkpoint_dir` keep a checkpoint for the retry.
"""

from respools_zenml.checkpoint import checkpoint_dir, load_state, save_state
from respools_zenml.decorator import step
from respools_zenml.demand import DemandError, StepDemand
from respools_zenml.settings import RespoolsSettings


def register_flavors() -> list[object]:
    """Register (or update) both orchestrator flavors with the active ZenML store."""
    from respools_zenml.flavors import register_flavors as register

    return list(register())


__all__ = [
    "DemandError",
    "RespoolsSettings",
    "StepDemand",
    "checkpoint_dir",
    "load_state",
    "register_flavors",
    "save_state",
    "step",
]
