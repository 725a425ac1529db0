"""HTTP routes, one module per resource, all under ``/v1`` except health and metrics."""
