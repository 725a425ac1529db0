"""What ``respools_kubernetes`` (``admission: orchestrator``) assumes of the installed ZenML beyond its public
API, checked in ZenML's own code so that a ZenML release that changes it fails here, not on a cluster.

The flavor answers a step's ``get_settings`` with its lease realized, waiting for the grant the first
time (:mod:`respools_zenml.kubernetes.orchestrator`). That is right only while ZenML's orchestrator pod
reads a step's settings to build that step's Job, in the thread that starts the step (not the one that
watches the running steps). These tests read ZenML's orchestrator-pod entrypoint and DAG runner as
Python syntax trees and check exactly that; they run against every ZenML minor the integration supports
(``make zenml-compat`` runs them against the other one).
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator

from zenml.integrations.kubernetes.orchestrators import kubernetes_orchestrator_entrypoint
from zenml.orchestrators import dag_runner


def tree_of(module: object) -> ast.Module:
    return ast.parse(inspect.getsource(module))  # type: ignore[arg-type]


def calls(node: ast.AST) -> Iterator[ast.Call]:
    yield from (found for found in ast.walk(node) if isinstance(found, ast.Call))


def dotted(call: ast.Call) -> str:
    return ast.unparse(call.func)


def step_startup_function() -> ast.FunctionDef:
    """The function ZenML's orchestrator pod hands its DAG runner to start a step."""
    main = next(
        node for node in tree_of(kubernetes_orchestrator_entrypoint).body if getattr(node, "name", None) == "main"
    )
    runner = next(call for call in calls(main) if dotted(call) == "DagRunner")
    startup = next(keyword.value for keyword in runner.keywords if keyword.arg == "node_startup_function")
    assert isinstance(startup, ast.Name), ast.unparse(startup)
    found = [node for node in ast.walk(main) if isinstance(node, ast.FunctionDef) and node.name == startup.id]
    assert len(found) == 1, f"no single step start-up function {startup.id!r} in ZenML's orchestrator pod"
    return found[0]


def test_the_orchestrator_pod_reads_a_steps_settings_before_it_creates_the_steps_job() -> None:
    startup = step_startup_function()
    settings_reads = [
        call
        for call in calls(startup)
        if dotted(call) == "orchestrator.get_settings" and "step_configurations" in ast.unparse(call.args[0])
    ]
    job_creations = [call for call in calls(startup) if dotted(call) == "kube_utils.create_job"]
    assert settings_reads, "ZenML's step start-up no longer asks the orchestrator for the step's settings"
    assert len(job_creations) == 1, "ZenML's step start-up creates the step's Job some other way"
    assert max(call.lineno for call in settings_reads) < job_creations[0].lineno
    # ... and builds the Job from those settings: the pod settings and the pod failure policy we answer.
    source = ast.unparse(startup)
    assert "settings.pod_settings" in source and "settings.pod_failure_policy" in source


def test_the_dag_runner_starts_steps_off_the_thread_that_watches_them() -> None:
    runner = next(
        node for node in tree_of(dag_runner).body if isinstance(node, ast.ClassDef) and node.name == "DagRunner"
    )
    source = ast.unparse(runner)
    assert "ThreadPoolExecutor(" in source, "ZenML's DAG runner no longer starts steps in worker threads"
    starts = [call for call in calls(runner) if dotted(call) == "self.node_startup_function"]
    assert starts, "ZenML's DAG runner no longer calls the step start-up function"
    submitted = [call for call in calls(runner) if dotted(call) == "self.startup_executor.submit"]
    assert submitted, "ZenML's DAG runner calls the step start-up function in its own loop"
