"""The pooled Databricks orchestrator: ZenML's own Databricks orchestrator, with each pipeline run's job
cluster on a respools lease."""
