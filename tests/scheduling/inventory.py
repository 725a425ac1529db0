"""Realistic inventories for placement tests."""

from __future__ import annotations

from typing import Any

A100_80 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"


def gpus(host: str, count: int, model: str = H100, memory_mb: int = 81559) -> list[dict[str, Any]]:
    return [{"uuid": f"GPU-{host}-{i}", "index": i, "model": model, "memory_mb": memory_mb} for i in range(count)]


def host(name: str, count: int, model: str = H100, **labels: str) -> dict[str, Any]:
    return {"name": name, "gpus": gpus(name, count, model), "labels": labels}


def mig_host(name: str, profiles: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "gpus": [
            {
                "uuid": f"GPU-{name}-0",
                "index": 0,
                "model": A100_80,
                "memory_mb": 81920,
                "mig_enabled": True,
                "mig_instances": [{"uuid": f"MIG-{name}-{i}", "profile": p} for i, p in enumerate(profiles)],
            }
        ],
    }
