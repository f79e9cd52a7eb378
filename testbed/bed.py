"""``python -m testbed.bed``: the test bed API server seeded with a synthetic cluster.

The demo runs it as a child process (so serving three replicas' watches does not share a
core with the demo itself).  It prints one JSON line once it serves --
``{"event": "serving", "kubeconfig": PATH, "url": URL, "objects": N}`` -- and runs until
stdin closes or SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import trio

from trio_typha.model import kinds as K

from .apiserver import ApiServer
from .cluster import TYPHA_NAMESPACE, load_cluster, typha_service


async def _stdin_closed() -> None:
    stdin = trio.lowlevel.FdStream(os.dup(0))
    while await stdin.receive_some(4096):
        pass


async def serve(size: str, kubeconfig: Path, host: str = "127.0.0.1") -> None:
    server = ApiServer(calico_groups=(K.CALICO_CRD_GROUP,), history_size=100_000)
    t0 = time.monotonic()
    count = load_cluster(server.store, size)
    if server.store.get(K.SERVICE, TYPHA_NAMESPACE, "calico-typha") is None:
        server.store.create(K.SERVICE, typha_service())
    seeded = time.monotonic() - t0
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve, host, 0)
            server.write_kubeconfig(kubeconfig)
            print(json.dumps({"event": "serving", "kubeconfig": str(kubeconfig),
                              "url": server.url, "objects": count,
                              "seed_s": round(seeded, 2)}), flush=True)

            async def stop_on_signal() -> None:
                async for _ in signals:
                    nursery.cancel_scope.cancel()

            nursery.start_soon(stop_on_signal)
            await _stdin_closed()
            nursery.cancel_scope.cancel()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m testbed.bed", description=__doc__.split("\n")[0])
    p.add_argument("--size", default="small", help="synthetic cluster: tiny|small|medium|large")
    p.add_argument("--kubeconfig", type=Path,
                   help="where to write the kubeconfig (default: a temp directory)")
    args = p.parse_args(argv)
    path = args.kubeconfig or Path(tempfile.mkdtemp(prefix="testbed-bed-"), "kubeconfig")
    try:
        trio.run(serve, args.size, path)
    except ValueError as exc:  # an unknown size
        print(f"testbed.bed: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
