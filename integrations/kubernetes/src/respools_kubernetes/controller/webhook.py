"""The mutating admission webhook: holds a GPU workload at creation, so its author need not.

For a Pod it adds the ``respools.io/admission`` scheduling gate (a gate can only be set at creation); for
a Job it sets ``suspend: true`` (Kueue's way), so no pod starts before the lease. Only workloads the
controller would admit are touched: labelled for a pool (on the object or its namespace), asking for
GPUs, not a Job's own pods. Everything else is allowed unchanged, and so is a workload this code cannot
read: the webhook's ``failurePolicy`` is ``Ignore`` (docs/kubernetes.md), and the controller suspends a
Job it sees running anyway.

The review is AdmissionReview ``admission.k8s.io/v1``; the object in it is read with the ``kubernetes``
client's models, and the answer is a JSON Patch.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from respools_kubernetes.api_json import from_api_json, to_api_json
from respools_kubernetes.controller import names
from respools_kubernetes.controller.demand import BadDemand, template_resources

log = logging.getLogger(__name__)

Obj = dict[str, Any]
NamespaceLookup = Callable[[str], Obj | None]
_MODELS = {"Pod": "V1Pod", "Job": "V1Job"}


def review(body: Obj, namespace_of: NamespaceLookup) -> Obj:
    """The AdmissionReview answer to an AdmissionReview request."""
    request = body.get("request") or {}
    uid = request.get("uid", "")
    response: Obj = {"uid": uid, "allowed": True}
    patch = _patch(request, namespace_of)
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def _patch(request: Obj, namespace_of: NamespaceLookup) -> list[Obj]:
    kind = (request.get("kind") or {}).get("kind")
    obj = request.get("object")
    if request.get("operation") != "CREATE" or kind not in _MODELS or not isinstance(obj, dict):
        return []
    # Read through the client's model: an object the API would not accept is left alone.
    obj = to_api_json(from_api_json(obj, _MODELS[kind]))
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or request.get("namespace") or ""
    if not _pool_labelled(meta, namespace, namespace_of):
        return []
    if kind == "Pod":
        owners = meta.get("ownerReferences") or []
        if any(o.get("kind") == "Job" and o.get("controller") for o in owners):
            return []
        template = {"metadata": meta, "spec": obj.get("spec") or {}}
    else:
        template = (obj.get("spec") or {}).get("template") or {}
    try:
        if not template_resources(template):
            return []
    except BadDemand:
        pass  # held all the same: the controller rejects it with the reason
    spec = obj.get("spec") or {}
    if kind == "Job":
        return [] if spec.get("suspend") else [{"op": "add", "path": "/spec/suspend", "value": True}]
    gates = spec.get("schedulingGates") or []
    if any(gate.get("name") == names.SCHEDULING_GATE for gate in gates):
        return []
    gate = {"name": names.SCHEDULING_GATE}
    if not gates:
        return [{"op": "add", "path": "/spec/schedulingGates", "value": [gate]}]
    return [{"op": "add", "path": "/spec/schedulingGates/-", "value": gate}]


def _pool_labelled(meta: Obj, namespace: str, namespace_of: NamespaceLookup) -> bool:
    if (meta.get("labels") or {}).get(names.POOL) or (meta.get("annotations") or {}).get(names.POOL):
        return True
    found = namespace_of(namespace) if namespace else None
    return bool(found and ((found.get("metadata") or {}).get("labels") or {}).get(names.POOL))


class WebhookServer:
    """HTTPS on ``POST /mutate``, served next to the controller."""

    def __init__(self, host: str, port: int, cert_file: str, key_file: str, namespace_of: NamespaceLookup) -> None:
        handler = _handler(namespace_of)
        self._server = ThreadingHTTPServer((host, port), handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(cert_file, key_file)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, name="webhook", daemon=True)

    @property
    def port(self) -> int:
        port: int = self._server.server_address[1]
        return port

    def start(self) -> WebhookServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(namespace_of: NamespaceLookup) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path.split("?")[0] != "/mutate":
                self.send_error(404, "the webhook serves POST /mutate")
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length))
                answer = review(body, namespace_of)
            except (ValueError, TypeError) as exc:
                self.send_error(400, f"not an AdmissionReview: {exc}")
                return
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("webhook: " + format, *args)

    return Handler
