"""The mutating webhook over HTTPS: AdmissionReview in, JSON Patch out; the patched object is read back
with the ``kubernetes`` client's models (a field the API lacks would fail there)."""

from __future__ import annotations

import base64
import copy
import datetime
import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from respools_kubernetes.api_json import from_api_json, to_api_json
from respools_kubernetes.controller.webhook import WebhookServer

NAMESPACES: dict[str, dict[str, Any]] = {
    "ml": {"metadata": {"name": "ml", "labels": {"respools.io/pool": "h100"}}},
    "web": {"metadata": {}},
}


def self_signed(tmp: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "tls.crt", tmp / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@pytest.fixture
def webhook(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    cert, key = self_signed(tmp_path)

    def namespace(name: str) -> dict[str, Any] | None:
        return NAMESPACES.get(name)

    server = WebhookServer("127.0.0.1", 0, str(cert), str(key), namespace).start()
    try:
        yield f"https://localhost:{server.port}/mutate", cert
    finally:
        server.stop()


def admission(kind: str, obj: dict[str, Any], namespace: str = "ml") -> dict[str, Any]:
    group, version = ("batch", "v1") if kind == "Job" else ("", "v1")
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
            "namespace": namespace,
            "operation": "CREATE",
            "object": obj,
        },
    }


def pod(gpus: str | None, **metadata: Any) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": gpus} if gpus else {"cpu": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml", **metadata},
        "spec": {"containers": [{"name": "main", "image": "python:3.11", "resources": {"limits": limits}}]},
    }


def mutate(url: str, cert: Path, review: dict[str, Any], model: str) -> dict[str, Any]:
    """The webhook's answer applied to the object, read back through the client's model."""
    answer = httpx.post(url, json=review, verify=ssl.create_default_context(cafile=cert), timeout=10).json()
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == review["request"]["uid"] and response["allowed"] is True
    obj: dict[str, Any] = copy.deepcopy(review["request"]["object"])
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"
        obj = dict(jsonpatch.apply_patch(obj, json.loads(base64.b64decode(response["patch"]))))
    assert to_api_json(from_api_json(obj, model)) == obj
    return obj


def test_a_gpu_pod_in_a_pool_namespace_is_created_gated(webhook: tuple[str, Path]) -> None:
    url, cert = webhook
    mutated = mutate(url, cert, admission("Pod", pod("1")), "V1Pod")
    assert mutated["spec"]["schedulingGates"] == [{"name": "respools.io/admission"}]

    others = pod("1")
    others["spec"]["schedulingGates"] = [{"name": "example.com/other"}]
    mutated = mutate(url, cert, admission("Pod", others), "V1Pod")
    assert mutated["spec"]["schedulingGates"] == [{"name": "example.com/other"}, {"name": "respools.io/admission"}]


def test_a_gpu_job_is_created_suspended(webhook: tuple[str, Path]) -> None:
    url, cert = webhook
    template = pod("2")
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "web", "labels": {"respools.io/pool": "h100"}},
        "spec": {"template": {"metadata": {}, "spec": {**template["spec"], "restartPolicy": "Never"}}},
    }
    mutated = mutate(url, cert, admission("Job", job, namespace="web"), "V1Job")
    assert mutated["spec"]["suspend"] is True


def test_what_respools_does_not_admit_is_left_alone(webhook: tuple[str, Path]) -> None:
    url, cert = webhook
    cpu_only = pod(None)
    outside = pod("1", namespace="web")
    jobs_own = pod(
        "1", ownerReferences=[{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": True}]
    )
    for obj, namespace in ((cpu_only, "ml"), (outside, "web"), (jobs_own, "ml")):
        assert mutate(url, cert, admission("Pod", obj, namespace), "V1Pod") == obj


def test_a_body_that_is_not_a_review_is_a_400(webhook: tuple[str, Path]) -> None:
    url, cert = webhook
    answer = httpx.post(url, content=b"{not json", verify=ssl.create_default_context(cafile=cert), timeout=10)
    assert answer.status_code == 400
    assert (
        httpx.post(
            url.replace("/mutate", "/other"), json={}, verify=ssl.create_default_context(cafile=cert), timeout=10
        ).status_code
        == 404
    )
