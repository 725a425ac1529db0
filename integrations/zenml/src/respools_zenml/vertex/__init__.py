"""The pooled Vertex step operator: ZenML's own Vertex step operator, with each step on a respools lease."""
