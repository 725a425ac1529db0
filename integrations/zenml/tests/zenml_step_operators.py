"""Real ZenML pipelines whose GPU step runs through a pooled step operator, for the tests.

``python zenml_step_operators.py SCENARIO --url URL --token TOKEN --pool POOL --endpoint FAKE --out OUT``
registers the respools flavors, makes a stack of ZenML's local orchestrator, the default artifact store and
the scenario's step operator (``vertex``: the pooled Vertex step operator on the fake Vertex endpoint;
``generic``: the generic pooled step operator wrapping the same, registered under another name), runs the
pipeline and writes a JSON summary (see :func:`zenml_pipelines.summary`).

The step's job runs on the fake (:class:`fake_vertex.Executor`): its first attempt (``RESPOOLS_ATTEMPT``
0) writes a marker and runs until it is cancelled; a later attempt returns at once.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, cast

import respools_zenml
from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform_v1
from zenml import pipeline, step
from zenml.client import Client
from zenml.config import DockerSettings, ResourceSettings, StepRetryConfig
from zenml.enums import StackComponentType
from zenml.integrations.gcp.flavors.vertex_step_operator_flavor import (
    VertexStepOperatorConfig,
    VertexStepOperatorFlavor,
)
from zenml.integrations.gcp.step_operators.vertex_step_operator import VertexStepOperator
from zenml.stack import StackValidator
from zenml_pipelines import run_and_summarize

STACK = "pooled-step-operator"
IMAGE = "us-docker.pkg.dev/ml-prod/train/zenml-step:1"
OPERATOR = "gpu-pool"


@step(
    enable_cache=False,
    step_operator=OPERATOR,
    retry=StepRetryConfig(max_retries=1, delay=0),
    settings={
        "resources": ResourceSettings(gpu_count=2),
        "docker": DockerSettings(skip_build=True, parent_image=IMAGE),
    },
)
def train(marker: str) -> dict[str, Any]:
    """Runs in the job on the fake; the lease reached it through the job's environment."""
    attempt = int(os.environ["RESPOOLS_ATTEMPT"])
    lease_id = os.environ["RESPOOLS_LEASE_ID"]
    seen: dict[str, Any] = {"attempt": attempt, "lease": lease_id, "url": os.environ["RESPOOLS_URL"]}
    seen["token"] = bool(os.environ.get("RESPOOLS_TOKEN"))
    if attempt == 0:
        Path(marker).write_text(json.dumps(seen))
        for _ in range(1200):  # until the pooled operator cancels the job at the preemption deadline
            time.sleep(0.1)
    return seen


@pipeline(enable_cache=False)
def train_pipeline(marker: str) -> None:
    train(marker=marker)


EMULATED_FLAVOR = "emulated_vertex"


class EmulatedVertexStepOperatorConfig(VertexStepOperatorConfig):
    """ZenML's Vertex step operator config, on the fake's endpoint."""

    api_endpoint: str

    @property
    def is_remote(self) -> bool:
        return False  # the fake runs the jobs on this machine


class EmulatedVertexStepOperator(VertexStepOperator):
    """ZenML's stock Vertex step operator, talking to the fake (REST, no Google credentials): what the
    generic pooled step operator wraps in the tests."""

    @property
    def validator(self) -> StackValidator | None:
        return StackValidator()

    def _get_authentication(self) -> tuple[Any, str]:
        return AnonymousCredentials(), "ml-prod"  # type: ignore[no-untyped-call]

    def get_job_service_client(self) -> aiplatform_v1.JobServiceClient:
        config = cast(EmulatedVertexStepOperatorConfig, self._config)
        return aiplatform_v1.JobServiceClient(
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            transport="rest",
            client_options={"api_endpoint": config.api_endpoint},
        )


class EmulatedVertexStepOperatorFlavor(VertexStepOperatorFlavor):
    @property
    def name(self) -> str:
        return EMULATED_FLAVOR

    @property
    def config_class(self) -> type[EmulatedVertexStepOperatorConfig]:
        return EmulatedVertexStepOperatorConfig

    @property
    def implementation_class(self) -> type[EmulatedVertexStepOperator]:
        return EmulatedVertexStepOperator


def setup(scenario: str, url: str, token: str, pool: str, endpoint: str) -> None:
    respools_zenml.register_flavors()
    client = Client()
    vertex: dict[str, Any] = {
        "project": "ml-prod",
        "region": "us-central1",
        "api_endpoint": endpoint,
        "respools_url": url,
        "respools_token": token,
        "pool": pool,
        "respools_poll_s": 0.2,
    }
    if scenario == "vertex":
        client.create_stack_component(
            name=OPERATOR,
            flavor="respools_vertex",
            component_type=StackComponentType.STEP_OPERATOR,
            configuration=vertex,
        )
    else:
        # The generic wrapper around a step operator registered on its own: ZenML's stock Vertex step
        # operator, pointed at the fake (EmulatedVertexStepOperator), which knows nothing of respools.
        client.create_flavor(
            source="zenml_step_operators.EmulatedVertexStepOperatorFlavor",
            component_type=StackComponentType.STEP_OPERATOR,
        )
        client.create_stack_component(
            name="vertex-jobs",
            flavor=EMULATED_FLAVOR,
            component_type=StackComponentType.STEP_OPERATOR,
            configuration={"project": "ml-prod", "region": "us-central1", "api_endpoint": endpoint},
        )
        wrapper: dict[str, Any] = {
            "step_operator": "vertex-jobs",
            "respools_url": url,
            "respools_token": token,
            "pool": pool,
            "respools_poll_s": 0.2,
        }
        client.create_stack_component(
            name=OPERATOR,
            flavor="respools_step_operator",
            component_type=StackComponentType.STEP_OPERATOR,
            configuration=wrapper,
        )
    client.create_stack(
        name=STACK,
        components={
            StackComponentType.ORCHESTRATOR: "default",
            StackComponentType.ARTIFACT_STORE: "default",
            StackComponentType.STEP_OPERATOR: OPERATOR,
        },
    )
    client.activate_stack(STACK)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=["vertex", "generic"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--pool", required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--marker", required=True)
    args = parser.parse_args(argv)
    setup(args.scenario, args.url, args.token, args.pool, args.endpoint)
    run_and_summarize(lambda: train_pipeline(marker=args.marker), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
