"""``python -m testbed.apiserver``: serve until SIGINT/SIGTERM.

Prints the path of the kubeconfig it wrote (and nothing else) on stdout, so a script can
``KUBECONFIG=$(python -m testbed.apiserver --port 6443 | head -1)``.
"""

from __future__ import annotations

import argparse
import logging
import signal
import ssl
import sys
import tempfile
from pathlib import Path

import trio

from trio_typha.model.kinds import CALICO_CRD_GROUP, CALICO_V3_GROUP

from .server import ApiServer

_GROUPS = {"crd": (CALICO_CRD_GROUP,), "v3": (CALICO_V3_GROUP,),
           "both": (CALICO_CRD_GROUP, CALICO_V3_GROUP)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m testbed.apiserver",
                                     description="Kubernetes API server test bed.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--calico-group", choices=sorted(_GROUPS), default="crd",
                        help="serve crd.projectcalico.org/v1, projectcalico.org/v3 or both")
    parser.add_argument("--cluster-network-policy", action="store_true",
                        help="serve policy.networking.k8s.io ClusterNetworkPolicies")
    parser.add_argument("--kubevirt", action="store_true",
                        help="serve kubevirt.io VirtualMachineInstanceMigrations")
    parser.add_argument("--kubeconfig", type=Path,
                        help="where to write the kubeconfig (default: a temp directory)")
    parser.add_argument("--history", type=int, default=10_000,
                        help="watch history window in events")
    parser.add_argument("--bookmark-interval", type=float, default=10.0,
                        help="seconds between watch bookmarks (kube-apiserver: 60)")
    parser.add_argument("--progress-interval", type=float, default=600.0,
                        help="seconds between etcd progress notifications (etcd: 600)")
    parser.add_argument("--require-token", action="store_true",
                        help="answer 401 to requests without the kubeconfig's token")
    parser.add_argument("--no-default-namespaces", action="store_true")
    parser.add_argument("--tls-cert", type=Path, help="serve HTTPS with this certificate")
    parser.add_argument("--tls-key", type=Path)
    parser.add_argument("--tls-ca", type=Path, help="CA to put in the kubeconfig")
    parser.add_argument("--disable-http2", action="store_true",
                        help="serve HTTP/1.1 only (kube-apiserver: --disable-http2-serving)")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    if (args.tls_cert is None) != (args.tls_key is None):
        parser.error("--tls-cert and --tls-key go together")
    return args


async def run(args: argparse.Namespace) -> None:
    context = None
    if args.tls_cert is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.tls_cert, args.tls_key)
    server = ApiServer(calico_groups=_GROUPS[args.calico_group],
                       cluster_network_policy=args.cluster_network_policy,
                       kubevirt=args.kubevirt,
                       history_size=args.history, bookmark_interval=args.bookmark_interval,
                       progress_interval=args.progress_interval,
                       require_token=args.require_token,
                       default_namespaces=not args.no_default_namespaces,
                       ssl_context=context, http2=not args.disable_http2,
                       ca_pem=args.tls_ca.read_bytes() if args.tls_ca else None)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve, args.host, args.port)
            path = args.kubeconfig or Path(tempfile.mkdtemp(prefix="testbed-apiserver-"),
                                           "kubeconfig")
            server.write_kubeconfig(path)
            print(path, flush=True)
            print(f"serving {server.url}", file=sys.stderr, flush=True)
            async for signum in signals:
                print(f"stopping on {signal.Signals(signum).name}", file=sys.stderr,
                      flush=True)
                nursery.cancel_scope.cancel()
                break


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    trio.run(run, args)


if __name__ == "__main__":
    main()
