"""The deployment files in ``server/``: every Kubernetes object of the kustomize base is valid for
Kubernetes 1.30 (strict: unknown fields are errors), the objects fit together (selectors, probes, the
secret and config map the pods read), the compose file wires the service to PostgreSQL, and the
Dockerfile has the shape the docs promise. No Docker engine or cluster is needed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from respools.server.settings import ENV_PREFIX, Settings

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "server"
BASE = SERVER / "kustomize" / "base"
COMPONENT = SERVER / "kustomize" / "components" / "kubernetes-backend"
K8S_VERSION = "1.30"


def load_all(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def render_without_kubectl(base: Path) -> list[dict[str, Any]]:
    """The base as kustomize would render it, for the transformations the base uses: its resources list,
    namespace, labels (into selectors too) and image overrides."""
    kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
    objects = [obj for name in kustomization["resources"] for obj in load_all(base / name)]
    namespace = kustomization.get("namespace")
    images = {image["name"]: image for image in kustomization.get("images", [])}
    for obj in objects:
        meta = obj.setdefault("metadata", {})
        if namespace and obj["kind"] not in {"Namespace", "ClusterRole", "ClusterRoleBinding"}:
            meta["namespace"] = namespace
        for group in kustomization.get("labels", []):
            meta.setdefault("labels", {}).update(group["pairs"])
            if group.get("includeSelectors"):
                _label_selectors(obj, group["pairs"])
        for container in _containers(obj):
            image = images.get(container["image"])
            if image is not None:
                container["image"] = f"{image['newName']}:{image['newTag']}"
    return objects


def _label_selectors(obj: dict[str, Any], pairs: dict[str, str]) -> None:
    spec = obj.get("spec", {})
    if obj["kind"] == "Service":
        spec.setdefault("selector", {}).update(pairs)
    elif "selector" in spec:
        spec["selector"].setdefault("matchLabels", {}).update(pairs)
    if "template" in spec:
        spec["template"].setdefault("metadata", {}).setdefault("labels", {}).update(pairs)


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    pod = obj.get("spec", {}).get("template", {}).get("spec", {})
    containers: list[dict[str, Any]] = pod.get("containers", [])
    return containers


def kubectl_render(path: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        ["kubectl", "kustomize", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module")
def base_objects() -> list[dict[str, Any]]:
    return render_without_kubectl(BASE)


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [obj for obj in objects if obj["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def test_every_base_file_object_is_valid_kubernetes() -> None:
    """Each file of the resources list, as written, against the 1.30 schemas (strict)."""
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    assert listed == {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}, "a manifest is not listed"
    for name in sorted(listed):
        for obj in load_all(BASE / name):
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    for obj in load_all(COMPONENT / "rbac.yaml"):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_rendered_base_is_valid_and_consistent(base_objects: list[dict[str, Any]]) -> None:
    for obj in base_objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    check_consistency(base_objects)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed: rendered by hand above")
def test_kubectl_kustomize_renders_a_valid_base(base_objects: list[dict[str, Any]]) -> None:
    rendered = kubectl_render(BASE)
    for obj in rendered:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    check_consistency(rendered)
    assert sorted((o["kind"], o["metadata"]["name"]) for o in rendered) == sorted(
        (o["kind"], o["metadata"]["name"]) for o in base_objects
    ), "the hand rendering and kustomize disagree on the objects"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubernetes_backend_component_renders(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    # kustomize refuses absolute paths and paths outside the overlay's root: link the tree in.
    (overlay / "kustomize").symlink_to(SERVER / "kustomize", target_is_directory=True)
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": ["kustomize/base"],
                "components": ["kustomize/components/kubernetes-backend"],
            }
        )
    )
    rendered = kubectl_render(overlay)
    for obj in rendered:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    pod = by_kind(rendered, "Deployment")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True
    binding = by_kind(rendered, "ClusterRoleBinding")
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]


def check_consistency(objects: list[dict[str, Any]]) -> None:
    """What a valid schema does not catch: the objects must refer to each other correctly."""
    deployment = by_kind(objects, "Deployment")
    service = by_kind(objects, "Service")
    config = by_kind(objects, "ConfigMap")
    secret = by_kind(objects, "Secret")
    pdb = by_kind(objects, "PodDisruptionBudget")
    spec = deployment["spec"]
    assert spec["replicas"] >= 2, "several replicas: one leads the reconciler, the others serve and stand by"
    pod_labels = spec["template"]["metadata"]["labels"]
    selectors = (spec["selector"]["matchLabels"], pdb["spec"]["selector"]["matchLabels"], service["spec"]["selector"])
    for selector in selectors:
        assert selector.items() <= pod_labels.items(), f"selector {selector} does not match the pods {pod_labels}"

    (container,) = spec["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8000}
    assert service["spec"]["ports"][0]["targetPort"] in ("http", 8000)
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["port"] in ports or container[probe]["httpGet"]["port"] in ports.values()

    assert container["envFrom"] == [{"configMapRef": {"name": config["metadata"]["name"]}}]
    (database,) = [e for e in container["env"] if e["name"] == "RESPOOLS_DATABASE_URL"]
    ref = database["valueFrom"]["secretKeyRef"]
    assert ref["name"] == secret["metadata"]["name"]
    assert ref["key"] in secret["stringData"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["template"]["spec"]["securityContext"]["runAsNonRoot"] is True

    namespaces = {o["metadata"].get("namespace") for o in objects if o["kind"] != "Namespace"}
    assert namespaces == {by_kind(objects, "Namespace")["metadata"]["name"]}

    # The settings the replicas would start with parse, and are PostgreSQL (several replicas need it).
    environment = dict(config["data"]) | {"RESPOOLS_DATABASE_URL": secret["stringData"][ref["key"]]}
    assert all(key.startswith(ENV_PREFIX) for key in environment)
    unknown = {k for k in environment if k.removeprefix(ENV_PREFIX).lower() not in Settings.model_fields}
    assert not unknown, f"settings the server does not read: {unknown}"
    settings = Settings.from_env(environment)
    assert settings.is_postgres
    workers = _workers(container.get("args", []))
    assert spec["replicas"] * workers * connections_per_process(settings) <= POSTGRES_MAX_CONNECTIONS


POSTGRES_MAX_CONNECTIONS = 100
"""PostgreSQL's default ``max_connections``: the shipped files must fit it."""


def connections_per_process(settings: Settings) -> int:
    """A read and a write engine with their pools, plus the leader's and the listener's connections
    (docs/operations-server.md)."""
    return 2 * (settings.db_pool_size + settings.db_max_overflow) + 2


def _workers(args: list[str]) -> int:
    return int(args[args.index("--workers") + 1]) if "--workers" in args else 1


def test_compose_runs_the_service_on_postgres() -> None:
    compose = yaml.safe_load((SERVER / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"db", "respools"}
    db, app = services["db"], services["respools"]
    assert db["image"].startswith("postgres:")
    assert "healthcheck" in db
    assert app["depends_on"] == {"db": {"condition": "service_healthy"}}
    context = (SERVER / app["build"]["context"]).resolve()
    assert context == ROOT
    assert (context / app["build"]["dockerfile"]).is_file()
    url = app["environment"]["RESPOOLS_DATABASE_URL"].replace("${POSTGRES_PASSWORD:-respools}", "respools")
    assert "@db:5432/" in url
    env = {k: str(v) for k, v in app["environment"].items() if k.startswith("RESPOOLS_DB_")}
    settings = Settings.from_env(env | {"RESPOOLS_DATABASE_URL": url})
    assert settings.is_postgres
    assert _workers(app["command"]) * connections_per_process(settings) <= POSTGRES_MAX_CONNECTIONS
    assert any("readyz" in part for part in app["healthcheck"]["test"])


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        pending += " " + line.rstrip("\\").strip() if pending else line.rstrip("\\").strip()
        if not line.endswith("\\"):
            keyword, _, rest = pending.partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
            pending = ""
    return instructions


def test_dockerfile_structure() -> None:
    instructions = dockerfile_instructions(SERVER / "Dockerfile")
    stages = [i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM"]
    assert len(stages) == 2, "a build stage for wheels and a slim runtime stage"
    final = instructions[stages[-1] :]
    keywords = [keyword for keyword, _ in final]
    user = [args for keyword, args in final if keyword == "USER"]
    assert user and not user[-1].startswith(("root", "0")), "the service runs as a non-root user"
    assert ("EXPOSE", "8000") in final
    assert "HEALTHCHECK" in keywords
    entrypoint = next(args for keyword, args in final if keyword == "ENTRYPOINT")
    assert '"respools", "server"' in entrypoint and "0.0.0.0" in entrypoint
    for keyword, args in instructions:
        if keyword == "COPY" and "--from" not in args:
            *sources, _dest = args.split()
            for source in sources:
                assert (ROOT / source).exists(), f"COPY {source}: no such path in the repository"
    ignore = (SERVER / "Dockerfile.dockerignore").read_text()
    assert "!src/**" in ignore and "!pyproject.toml" in ignore
