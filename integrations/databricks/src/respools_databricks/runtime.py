"""Databricks Runtime versions: leased GPUs need the ML runtime built for GPUs (CUDA, drivers, GPU
libraries), whose keys read ``<version>-gpu-ml-scala<scala>``."""

from __future__ import annotations

import re

from databricks.sdk import WorkspaceClient

from respools.backends.protocol import BackendError

_GPU_ML_RE = re.compile(r"-gpu-ml-scala2\.\d+$")


def require_gpu_ml_runtime(spark_version: str) -> str:
    if not _GPU_ML_RE.search(spark_version):
        raise BackendError(
            f"spark_version {spark_version!r} is not a GPU ML runtime; leased GPUs need one such as "
            "'15.4.x-gpu-ml-scala2.12'"
        )
    return spark_version


def latest_gpu_ml_runtime(workspace: WorkspaceClient) -> str:
    """The workspace's newest long-term-support GPU ML runtime (the SDK's own selection)."""
    version: str = workspace.clusters.select_spark_version(latest=True, long_term_support=True, ml=True, gpu=True)
    return require_gpu_ml_runtime(version)
