"""Setting up worlds for the dashboard tests through the real API: pools with an inventory (whole GPUs,
a MIG-partitioned GPU), subjects, policies, tokens, and leases granted by the real reconciler."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def a100(uuid_: str, index: int) -> dict[str, Any]:
    return {"uuid": uuid_, "index": index, "model": "NVIDIA A100-SXM4-80GB", "memory_mb": 81920}


def a100_mig(uuid_: str, index: int, profiles: list[str]) -> dict[str, Any]:
    return a100(uuid_, index) | {
        "mig_enabled": True,
        "mig_instances": [{"uuid": f"MIG-{uuid_}-{i}", "profile": p} for i, p in enumerate(profiles)],
    }


@dataclass
class World:
    """A fresh pool and subject (unique names, so tests sharing one server stay apart)."""

    pool: str
    subject: str
    token: str
    gpus: list[str] = field(default_factory=list)


class Api:
    """The admin's view of the API, with helpers for the set-up steps."""

    def __init__(self, base_url: str, admin_token: str) -> None:
        self.base_url = base_url
        self.client = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {admin_token}"}, timeout=30)

    def ok(self, method: str, path: str, token: str | None = None, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        response = self.client.request(method, path, headers=headers, **kwargs)
        assert response.status_code < 300, (method, path, response.status_code, response.text)
        return response.json() if response.content else None

    def token(self, role: str, subject: str | None = None) -> str:
        body = {"role": role} | ({"subject": subject} if subject else {})
        token: str = self.ok("POST", "/v1/tokens", json=body)["token"]
        return token

    def world(
        self,
        *,
        whole_gpus: int = 2,
        mig_profiles: list[str] | None = None,
        reserved_gpu: float = 1,
        grace_s: float = 60.0,
        name: str = "pool",
    ) -> World:
        suffix = uuid.uuid4().hex[:6]
        world = World(pool=f"{name}-{suffix}", subject=f"team-{suffix}", token="")
        gpus = [a100(f"GPU-{suffix}-{i}", i) for i in range(whole_gpus)]
        if mig_profiles:
            gpus.append(a100_mig(f"GPU-{suffix}-m", whole_gpus, mig_profiles))
        world.gpus = [g["uuid"] for g in gpus]
        self.ok(
            "PUT",
            f"/v1/pools/{world.pool}",
            json={
                "name": world.pool,
                "inventory": [{"name": f"node-{suffix}", "gpus": gpus}],
                "preemption_grace_s": grace_s,
            },
        )
        self.ok("PUT", f"/v1/subjects/{world.subject}", json={"name": world.subject})
        self.ok(
            "POST",
            "/v1/policies",
            json={"subject": world.subject, "pool": world.pool, "reserved": {"gpu": reserved_gpu}, "priority": 10},
        )
        world.token = self.token("subject", world.subject)
        return world

    def add_subject(self, world: World, name: str, **policy: Any) -> tuple[str, str]:
        subject = f"{name}-{world.pool.rsplit('-', 1)[-1]}"
        self.ok("PUT", f"/v1/subjects/{subject}", json={"name": subject})
        self.ok("POST", "/v1/policies", json={"subject": subject, "pool": world.pool} | policy)
        return subject, self.token("subject", subject)

    def submit(self, token: str, wait: float = 10.0, **spec: Any) -> dict[str, Any]:
        response = self.client.post(
            f"/v1/requests?wait={wait}", json=spec, headers={"Authorization": f"Bearer {token}"}
        )
        assert response.status_code in (200, 201), response.text
        body: dict[str, Any] = response.json()
        return body

    def grant(self, token: str, **spec: Any) -> dict[str, Any]:
        """Submit and wait for the grant; returns the lease."""
        request = self.submit(token, **spec)
        assert request["state"] == "granted", request
        lease: dict[str, Any] = self.ok("GET", f"/v1/leases/{request['lease_id']}")
        return lease

    def close(self) -> None:
        self.client.close()
