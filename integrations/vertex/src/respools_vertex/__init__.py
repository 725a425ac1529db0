"""respools on Vertex AI: whole-GPU leases become custom-job machine specs (machine type, accelerator type
and count from the valid pairs); capacity is the project's GPU quota; ``stop`` cancels the job."""

from respools_vertex.backend import VertexBackend
from respools_vertex.quota import CloudQuotas
from respools_vertex.settings import VertexSettings
from respools_vertex.spec import apply_to_custom_job

__all__ = ["CloudQuotas", "VertexBackend", "VertexSettings", "apply_to_custom_job"]
