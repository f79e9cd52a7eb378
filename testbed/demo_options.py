"""``trio-typha demo``'s options (kept apart from :mod:`testbed.demo` so that building the
command line parser imports nothing heavy)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from trio_typha.model.kv import SYNCER_TYPES


@dataclass
class Options:
    size: str = "small"
    agents: int = 50
    grpc_share: float = 0.5
    syncers: tuple[str, ...] = ("felix",)
    churn_rate: float = 10.0
    duration: float = 30.0
    kill_replica_at: float | None = None
    restart_replica_after: float | None = None
    linger: float = 0.0
    processes: int = 2
    startup_delay_max: float = 2.0
    reconnect_delay_max: float = 3.0
    dashboard_host: str = "127.0.0.1"
    dashboard_port: int = 0
    json: bool = False
    quiescence_timeout: float = 60.0
    workdir: str = ""



def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", default="small", choices=("tiny", "small", "medium", "large"),
                   help="synthetic cluster in the test bed API server (default small)")
    p.add_argument("--agents", type=int, default=50, help="simulated node agents (default 50)")
    p.add_argument("--grpc-share", type=float, default=0.5, metavar="FRACTION",
                   help="protocol mix: the fraction of agents on gRPC, the rest on Typha's "
                        "protocol (default 0.5)")
    p.add_argument("--syncers", default="felix",
                   help="comma-separated syncer types the agents use, in turn (default felix)")
    p.add_argument("--churn-rate", type=float, default=10.0, metavar="WRITES_PER_S",
                   help="writes per second: NetworkPolicies created, updated and deleted, pods "
                        "relabelled (default 10; 0: no churn)")
    p.add_argument("--duration", type=float, default=30.0, metavar="SECONDS",
                   help="seconds of churn (default 30)")
    p.add_argument("--kill-replica-at", type=float, metavar="SECONDS",
                   help="SIGKILL one replica this many seconds into the churn")
    p.add_argument("--restart-replica-after", type=float, metavar="SECONDS",
                   help="start the killed replica again this many seconds after the kill")
    p.add_argument("--linger", type=float, default=0.0, metavar="SECONDS",
                   help="keep the dashboard up this long after the verdict (default 0)")
    p.add_argument("--processes", type=int, default=2, help="fleet worker processes")
    p.add_argument("--startup-delay-max", type=float, default=2.0, metavar="SECONDS",
                   help="each agent waits a random 0..SECONDS before its first connection")
    p.add_argument("--reconnect-delay-max", type=float, default=3.0, metavar="SECONDS",
                   help="after a dropped connection an agent waits a random 0..SECONDS")
    p.add_argument("--dashboard-port", type=int, default=0, help="default: any free port")
    p.add_argument("--dashboard-host", default="127.0.0.1")
    p.add_argument("--quiescence-timeout", type=float, default=60.0, metavar="SECONDS")
    p.add_argument("--workdir", default="", help="logs and kubeconfig (default: a temp dir)")
    p.add_argument("--json", action="store_true", help="print the verdict as one JSON object")


def options(args: argparse.Namespace) -> Options:
    syncers = tuple(s.strip() for s in args.syncers.split(",") if s.strip())
    bad = [s for s in syncers if s not in SYNCER_TYPES]
    if bad or not syncers:
        raise ValueError(f"--syncers: unknown syncer type(s) {bad}; choose from "
                         f"{', '.join(SYNCER_TYPES)}")
    if args.agents < 1 or args.processes < 1:
        raise ValueError("--agents and --processes must be at least 1")
    if args.restart_replica_after is not None and args.kill_replica_at is None:
        raise ValueError("--restart-replica-after needs --kill-replica-at")
    if not 0 <= args.grpc_share <= 1:
        raise ValueError(f"--grpc-share must be between 0 and 1, got {args.grpc_share}")
    return Options(size=args.size, agents=args.agents, grpc_share=args.grpc_share,
                   syncers=syncers, churn_rate=args.churn_rate, duration=args.duration,
                   kill_replica_at=args.kill_replica_at,
                   restart_replica_after=args.restart_replica_after, linger=args.linger,
                   processes=min(args.processes, args.agents),
                   startup_delay_max=args.startup_delay_max,
                   reconnect_delay_max=args.reconnect_delay_max,
                   dashboard_host=args.dashboard_host, dashboard_port=args.dashboard_port,
                   json=args.json, quiescence_timeout=args.quiescence_timeout,
                   workdir=args.workdir)
