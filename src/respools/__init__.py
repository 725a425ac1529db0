"""respools: GPU resource pools for ML pipelines, on any stack."""

__version__ = "0.1.0"
