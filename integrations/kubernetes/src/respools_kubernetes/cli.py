"""``respools-kubernetes``: the command line of the Kubernetes integration (``controller`` runs it)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from kubernetes import config
from kubernetes.client import ApiClient, Configuration

from respools import Client
from respools_kubernetes.controller import Controller, ControllerSettings
from respools_kubernetes.controller.webhook import WebhookServer


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="respools-kubernetes", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "controller",
        help="admit labelled GPU workloads through respools leases and report Nodes as pool inventory",
        description="The service is reached with RESPOOLS_URL and RESPOOLS_TOKEN (an admin token: the "
        "controller reports hosts and submits for the subjects workloads name).",
    )
    run.add_argument("--url", help="respools service (default: RESPOOLS_URL)")
    run.add_argument("--token", help="admin token (default: RESPOOLS_TOKEN)")
    run.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    run.add_argument("--kubeconfig", help="kubeconfig file (default: the usual lookup)")
    run.add_argument("--context", help="kubeconfig context")
    run.add_argument("--namespace", default=ControllerSettings.namespace, help="where the leader Lease lives")
    run.add_argument("--resync-s", type=float, default=ControllerSettings.resync_s)
    run.add_argument("--host-ttl-s", type=float, default=ControllerSettings.host_ttl_s)
    run.add_argument("--max-retries", type=int, default=ControllerSettings.default_max_retries)
    run.add_argument("--webhook-port", type=int, default=9443, help="HTTPS port of the admission webhook")
    run.add_argument("--tls-cert", help="the webhook's certificate (PEM); without it no webhook is served")
    run.add_argument("--tls-key", help="the webhook certificate's private key (PEM)")
    run.add_argument("--log-level", default="INFO")
    return parser


def _api_client(args: argparse.Namespace) -> ApiClient:
    if args.in_cluster:
        configuration = Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return ApiClient(configuration)
    client: ApiClient = config.new_client_from_config(config_file=args.kubeconfig, context=args.context)
    return client


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = ControllerSettings(
        namespace=args.namespace,
        resync_s=args.resync_s,
        host_ttl_s=args.host_ttl_s,
        default_max_retries=args.max_retries,
    )
    controller = Controller(_api_client(args), Client(args.url, args.token), settings)
    if args.tls_cert:
        if not args.tls_key:
            raise SystemExit("--tls-cert needs --tls-key: the webhook serves HTTPS with both")
        WebhookServer("0.0.0.0", args.webhook_port, args.tls_cert, args.tls_key, controller.namespace).start()

    def stop(signum: int, frame: FrameType | None) -> None:
        controller.stop()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    controller.run_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
