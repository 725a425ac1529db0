"""The pooled local orchestrator: each pooled step in a process of its own, under a respools lease."""
