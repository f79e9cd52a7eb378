"""``trio-typha``: serve | client | connections | demo.

``serve`` runs the daemon (configured like Typha: TYPHA_* variables, a config file, and flags
that override both).  ``client`` is a debugging client in the spirit of Calico's typha-client:
it prints the snapshot size, the time to in-sync, then updates; ``--once`` exits after in-sync
with a one-line summary.  ``connections`` asks one or more replicas who is connected
(``GET /connections`` on the health port) and prints a table with the spread over replicas.

Other distributions add subcommands through the ``trio_typha.commands`` entry point group
(:class:`Command`): ``demo`` comes with the test bed, ``trio-typha-testbed``, which this
package neither ships nor imports.  Without it ``demo`` says how to get it.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import NamedTuple, Protocol

import trio

from . import BUILD_VERSION
from .config import ConfigError, help_table
from .config_sources import early_log_level, load_config
from .datastore.memory import StoreError
from .datastore.seed import SeedError
from .datastore.synthetic import SIZES as CLUSTER_SIZES
from .logs import setup_logging
from .model.kv import SYNCER_TYPES
from .startup import EXIT_CONFIG, EXIT_TLS_FILES, first_startup_error
from .tls.server import TLSFilesError

log = logging.getLogger("trio_typha.cli")

# flag -> Typha parameter it sets
_SERVE_FLAGS = {
    "datastore": "DatastoreType",
    "host": "ServerHost",
    "port": "ServerPort",
    "seed": "MemorySeedFile",
    "demo_cluster": "MemoryDemoCluster",
    "log_level": "LogSeverityScreen",
    "health_port": "HealthPort",
    "health_host": "HealthHost",
    "metrics_port": "PrometheusMetricsPort",
    "protocols": "ServerProtocols",
    "churn": "MemoryChurnRate",
}


#: The entry point group of subcommands other distributions provide.
COMMANDS_GROUP = "trio_typha.commands"
#: The exit status of an optional subcommand whose distribution is not installed.
EXIT_NOT_INSTALLED = 2


class OptionalCommand(NamedTuple):
    """A subcommand another distribution provides, and how to get it."""

    distribution: str
    what: str
    checkout_dir: str  # its source in a trio-typha checkout
    help: str


OPTIONAL_COMMANDS = {
    "demo": OptionalCommand("trio-typha-testbed", "the test bed", "./testbed",
                     "the whole system on this machine: an API server, three replicas, an "
                     "agent fleet, churn, a dashboard and a convergence verdict"),
}


class Command(Protocol):
    """What a ``trio_typha.commands`` entry point names."""

    help: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


class _Missing:
    """Stands in for an optional subcommand that cannot be loaded; running it says why."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        spec = OPTIONAL_COMMANDS[name]
        self.help = f"{spec.help} (needs {spec.distribution})"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """None: whatever follows is the missing command's (see :func:`main`)."""

    def run(self, args: argparse.Namespace) -> int:
        print(f"trio-typha: {self.name} {self.reason}", file=sys.stderr)
        return EXIT_NOT_INSTALLED


def plugin_commands() -> dict[str, Command]:
    """The optional subcommands: each one as its installed distribution provides it, or a
    :class:`_Missing` saying how to install it (a broken plugin never stops ``serve``)."""
    from importlib.metadata import entry_points

    found = {ep.name: ep for ep in entry_points(group=COMMANDS_GROUP)}
    out: dict[str, Command] = {}
    for name, spec in OPTIONAL_COMMANDS.items():
        if name not in found:
            out[name] = _Missing(name, f"needs {spec.what}, which is not installed: pip "
                                       f"install {spec.distribution} (in a checkout: pip "
                                       f"install {spec.checkout_dir})")
            continue
        try:
            out[name] = found[name].load()
        except ImportError as exc:
            out[name] = _Missing(name, f"needs {spec.what}: {spec.distribution} is installed "
                                       f"but cannot be loaded ({exc})")
    return out


def _parser(commands: dict[str, Command] | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="trio-typha", description=__doc__.split("\n\n")[0])
    p.add_argument("--version", action="version", version=BUILD_VERSION)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser(
        "serve", help="run the Typha server", formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="parameters (TYPHA_<NAME> in the environment, NAME=value in the config file, "
               "--set NAME=value):\n" + help_table())
    s.add_argument("-c", "--config-file", help="INI config file (default /etc/calico/typha.cfg)")
    s.add_argument("--datastore", help="kubernetes | etcdv3 | memory (TYPHA_DATASTORETYPE)")
    s.add_argument("--host", help="listen address (TYPHA_SERVERHOST)")
    s.add_argument("--port", help="listen port, default 5473 (TYPHA_SERVERPORT)")
    s.add_argument("--seed", help="memory datastore: YAML of resources to load")
    s.add_argument("--demo-cluster", help="memory datastore: synthetic cluster "
                   + " | ".join(CLUSTER_SIZES))
    s.add_argument("--churn", metavar="RATE", help="memory datastore: writes per second of "
                   "pod/policy churn")
    s.add_argument("--log-level", help="DEBUG | INFO | WARNING | ERROR (TYPHA_LOGSEVERITYSCREEN)")
    s.add_argument("--health", action="store_true", help="serve /liveness and /readiness")
    s.add_argument("--health-host", help="health bind address (TYPHA_HEALTHHOST)")
    s.add_argument("--health-port", help="health port, default 9098 (TYPHA_HEALTHPORT)")
    s.add_argument("--metrics", action="store_true", help="serve Prometheus /metrics")
    s.add_argument("--metrics-port", help="metrics port, default 9093")
    s.add_argument("--protocols", help="all | typha | grpc (TYPHA_SERVERPROTOCOLS)")
    s.add_argument("--strict-config", action="store_true",
                   help="an unknown --set name is an error (by default: logged and ignored)")
    s.add_argument("--set", action="append", default=[], metavar="PARAM=VALUE",
                   help="set any Typha parameter by name, e.g. --set ServerPingIntervalSecs=5")

    c = sub.add_parser("client", help="debugging client: snapshot, in-sync, then updates")
    c.add_argument("--addr", default="127.0.0.1:5473",
                   help="HOST:PORT of the server (comma-separated: tried in turn)")
    c.add_argument("--k8s-service", metavar="NAME", help="discover Typha from this Service's "
                   "EndpointSlices (Felix's TyphaK8sServiceName; uses KUBECONFIG)")
    c.add_argument("--k8s-namespace", default="kube-system")
    c.add_argument("--node-name", default="", help="prefer Typhas on this node")
    c.add_argument("--srv", metavar="NAME", help="discover Typha from DNS SRV records")
    c.add_argument("--dns-server", metavar="HOST:PORT", help="for --srv (default: resolv.conf)")
    c.add_argument("--startup-delay-max", type=float, default=0.0, metavar="SECONDS",
                   help="wait a random 0..SECONDS before connecting")
    c.add_argument("--syncer", default="felix", choices=SYNCER_TYPES)
    c.add_argument("--protocol", default="typha", choices=("typha", "grpc"),
                   help="Typha's gob protocol (as calico-node) or the gRPC Sync service")
    c.add_argument("--once", action="store_true", help="exit after in-sync with a summary")
    c.add_argument("--json", action="store_true", help="print keys and values as JSON lines")
    c.add_argument("--hostname", default="trio-typha-client")
    c.add_argument("--no-compression", action="store_true",
                   help="typha protocol: act as a legacy client without snappy")
    c.add_argument("--ca-file")
    c.add_argument("--cert-file")
    c.add_argument("--key-file")
    c.add_argument("--server-cn", default="", help="require this CN in the server "
                   "certificate (TLS); with --server-uri-san, either one matching is enough")
    c.add_argument("--server-uri-san", default="",
                   help="require this URI SAN in the server certificate (TLS)")
    c.add_argument("--log-level", default="WARNING")
    n = sub.add_parser("connections", help="who is connected to which replica (GET /connections)")
    n.add_argument("--addr", action="append", required=True, metavar="HOST:PORT",
                   help="a replica's health address (TYPHA_HEALTHHOST:TYPHA_HEALTHPORT); "
                   "repeat for several replicas")
    n.add_argument("--json", action="store_true", help="print the replicas' documents as JSON")
    n.add_argument("--timeout", type=float, default=5.0, help="seconds per replica")

    for name, command in (plugin_commands() if commands is None else commands).items():
        command.add_arguments(sub.add_parser(name, help=command.help,
                                             description=command.help))
    return p


def _connections(args: argparse.Namespace) -> int:
    import json

    import httpx

    from .observe.connections import render
    documents: dict[str, dict[str, object] | str] = {}
    for addr in args.addr:
        url = f"http://{addr}/connections"
        try:
            resp = httpx.get(url, timeout=args.timeout)
            resp.raise_for_status()
            documents[addr] = resp.json()
        except (httpx.HTTPError, ValueError) as exc:
            documents[addr] = str(exc) or type(exc).__name__
    if args.json:
        print(json.dumps(documents, indent=2, sort_keys=True))
    else:
        print(render(documents), end="")
    return 1 if any(isinstance(d, str) for d in documents.values()) else 0


def _serve(args: argparse.Namespace) -> int:
    overrides: dict[str, str] = {}
    for flag, param in _SERVE_FLAGS.items():
        value = getattr(args, flag, None)
        if value is not None:
            overrides[param] = str(value)
    if args.seed or args.demo_cluster:
        overrides.setdefault("DatastoreType", "memory")
    if args.health:
        overrides["HealthEnabled"] = "true"
    if args.metrics:
        overrides["PrometheusMetricsEnabled"] = "true"
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: expected PARAM=VALUE")
        overrides[name] = value
    cfg = load_config(config_file=args.config_file, overrides=overrides,
                      strict=args.strict_config)
    setup_logging(cfg.log_severity_screen, file_path=cfg.log_file_path,
                  file_level=cfg.log_severity_file, sys_level=cfg.log_severity_sys)
    try:
        if cfg.datastore_type == "typha":
            from .relay_process import Relay
            relay = Relay(cfg, handle_signals=True)
            trio.run(relay.run)
        else:
            from .daemon import Daemon
            daemon = Daemon(cfg, handle_signals=True)
            trio.run(daemon.run)
    except BaseException as exc:  # noqa: BLE001 - only named start-up failures are handled
        failure = first_startup_error(exc)
        if failure is None:
            raise
        print(f"trio-typha: {failure.message}", file=sys.stderr)
        return failure.exit_code
    return 0


def _client(args: argparse.Namespace) -> int:
    setup_logging(args.log_level)
    from .client.cli import run_client
    return trio.run(run_client, args)


def main(argv: Sequence[str] | None = None) -> int:
    setup_logging(early_log_level())
    # ``serve`` takes no optional command: not looking them up (importlib.metadata, the
    # installed distributions, the test bed's modules) is ~4 % of a start's CPU on etcd.
    words = [a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")]
    commands = {} if words[:1] == ["serve"] else plugin_commands()
    parser = _parser(commands)
    args, unknown = parser.parse_known_args(argv)
    if unknown and not isinstance(commands.get(args.command), _Missing):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "connections":
            return _connections(args)
        if args.command in commands:
            setup_logging("WARNING")
            return commands[args.command].run(args)
        return _client(args)
    except TLSFilesError as exc:
        print(f"trio-typha: TLS files: {exc}", file=sys.stderr)
        return EXIT_TLS_FILES
    except ConfigError as exc:
        print(f"trio-typha: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except (SeedError, StoreError) as exc:
        print(f"trio-typha: cannot load the memory datastore: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
