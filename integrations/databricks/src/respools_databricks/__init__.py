"""respools on Databricks: whole-GPU leases become GPU job clusters (node type, GPU ML runtime, workers),
fractions become Spark task GPU amounts on a shared GPU cluster; ``stop`` cancels the run."""

from respools_databricks.backend import DatabricksBackend
from respools_databricks.settings import DatabricksSettings
from respools_databricks.spec import attach_to_job

__all__ = ["DatabricksBackend", "DatabricksSettings", "attach_to_job"]
