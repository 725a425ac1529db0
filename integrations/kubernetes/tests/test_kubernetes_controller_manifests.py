"""The controller's deployment files (``server/kustomize/components/controller``) are valid Kubernetes 1.30
objects (strict: unknown fields fail), run the console script this distribution installs, and grant the
controller exactly the API verbs its code uses."""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[3]
COMPONENT = ROOT / "server" / "kustomize" / "components" / "controller"


def objects() -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    return [
        doc for name in kustomization["resources"] for doc in yaml.safe_load_all((COMPONENT / name).read_text()) if doc
    ]


def test_every_object_is_valid_for_kubernetes_1_30() -> None:
    found = objects()
    assert {obj["kind"] for obj in found} == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
    }
    for obj in found:
        kubernetes_validate.validate(obj, "1.30", strict=True)


def test_the_deployment_runs_the_installed_controller_command() -> None:
    (deployment,) = [obj for obj in objects() if obj["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"][:2] == ["respools-kubernetes", "controller"]
    (script,) = entry_points(group="console_scripts", name="respools-kubernetes")
    assert script.value == "respools_kubernetes.cli:main"
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "respools-controller"


def test_rbac_grants_only_what_the_controller_calls() -> None:
    rules = {
        (group, resource): sorted(rule["verbs"])
        for obj in objects()
        if obj["kind"] in ("ClusterRole", "Role")
        for rule in obj["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert rules == {
        ("", "nodes"): ["get", "list", "watch"],
        ("", "pods"): ["create", "delete", "get", "list", "patch", "watch"],
        ("batch", "jobs"): ["get", "list", "patch", "watch"],
        ("", "namespaces"): ["get"],
        ("", "events"): ["create"],
        ("coordination.k8s.io", "leases"): ["create", "get", "patch"],
    }


WEBHOOK = ROOT / "server" / "kustomize" / "components" / "controller-webhook"


def test_the_webhook_component_is_valid_and_documents_its_failure_policy_and_namespaces() -> None:
    found = [doc for doc in yaml.safe_load_all((WEBHOOK / "webhook.yaml").read_text()) if doc]
    for obj in found:
        kubernetes_validate.validate(obj, "1.30", strict=True)
    (config,) = [obj for obj in found if obj["kind"] == "MutatingWebhookConfiguration"]
    (hook,) = config["webhooks"]
    assert hook["failurePolicy"] == "Ignore" and hook["sideEffects"] == "None"
    assert hook["namespaceSelector"]["matchExpressions"] == [{"key": "respools.io/pool", "operator": "Exists"}]
    assert {(r["apiGroups"][0], r["resources"][0]) for r in hook["rules"]} == {("", "pods"), ("batch", "jobs")}
    # The patched Deployment (strategic merge by container name) is still a valid Deployment.
    (deployment,) = [obj for obj in objects() if obj["kind"] == "Deployment"]
    patch = yaml.safe_load((WEBHOOK / "deployment-patch.yaml").read_text())
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container.update(patch["spec"]["template"]["spec"]["containers"][0])
    deployment["spec"]["template"]["spec"]["volumes"] = patch["spec"]["template"]["spec"]["volumes"]
    kubernetes_validate.validate(deployment, "1.30", strict=True)
    (service,) = [obj for obj in found if obj["kind"] == "Service"]
    assert service["spec"]["ports"][0]["targetPort"] == int(container["args"][-1])
