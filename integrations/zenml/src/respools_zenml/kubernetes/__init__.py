"""The pooled Kubernetes orchestrator: a step's pod is created only under a granted respools lease."""
