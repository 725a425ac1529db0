"""Configuration of the pooled orchestrators: where the respools server is (component config) and how a
pipeline's steps ask it for capacity (ZenML settings, per pipeline or per step).

Settings follow ZenML's pattern: every field of :class:`RespoolsSettings` is also a field of the
orchestrator's config, which gives the stack-wide default; ``settings={"orchestrator": RespoolsSettings(...)}``
on a pipeline or a step overrides it there.
"""

from __future__ import annotations

from pydantic import BaseModel, Field
from zenml.config.base_settings import BaseSettings
from zenml.utils.secret_utils import SecretField

from respools import Client


class RespoolsSettings(BaseSettings):
    """How steps run by a pooled orchestrator ask for capacity."""

    pool: str | None = Field(
        default=None, description="pool to ask; default: every pool the token's subject has a policy on"
    )
    priority: int = Field(default=0, description="request priority within the subject (higher first)")
    preemptible: bool | None = Field(
        default=None,
        description="default for steps that say nothing (neither respools_zenml.step(preemptible=...) nor "
        "ResourceSettings.reclaim_tolerance); None keeps ZenML's default for isolated steps: preemptible",
    )
    labels: dict[str, str] = Field(default_factory=dict, description="extra request labels (team, cost centre)")
    pool_all_steps: bool = Field(
        default=False,
        description="also lease a step_run slot for steps that declare no resources; by default they run "
        "without a lease, as on the plain orchestrator",
    )


class RespoolsConnection(BaseModel):
    """Where the respools server is. Unset fields fall back to ``RESPOOLS_URL`` / ``RESPOOLS_TOKEN`` and the
    respools config file, as for any respools client."""

    respools_url: str | None = Field(default=None, description="e.g. https://respools.example.com")
    respools_token: str | None = SecretField(
        default=None, description="the orchestrator's subject token; use a ZenML secret: {{respools.token}}"
    )
    respools_timeout_s: float | None = Field(default=None, gt=0, description="HTTP timeout per call")

    def respools_client(self) -> Client:
        return Client(self.respools_url, self.respools_token, timeout=self.respools_timeout_s)
