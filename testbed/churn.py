"""NetworkPolicy churn through the official ``kubernetes`` client, with a record of every write.

Works unchanged against any API server the client can reach: a kind cluster, a real one, or
the test bed's (``python -m testbed.apiserver``).  It owns what it touches: namespaces
``<prefix>-<i>`` (created at set-up), the NetworkPolicies in them labelled
``trio-typha.churn=<prefix>`` (adopted if a previous run left some), optionally placeholder
pods whose labels it rewrites, and optionally extra namespaces it creates, relabels and deletes.

Each :meth:`Churn.step` makes one write, chosen by the configured :class:`Mix` among the
operations the current state allows, and appends a :class:`Write` (wall-clock and monotonic
time taken just before the request, the object, the resourceVersion the server answered) to
:attr:`Churn.writes`.  :meth:`Churn.run` paces steps at a fixed rate (open loop: a slow server
makes it fall behind, never speed up later than the schedule); :func:`run_in_trio` does the
same from trio, with the blocking calls in a worker thread and trio's clock for pacing.

``python -m testbed.churn --rate 20 --seconds 60`` runs it against the current kube-context.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import urllib3

from .cluster import k8s_namespace, k8s_pod

__all__ = ["Churn", "ChurnConfig", "Mix", "Write", "api_client", "main", "run_in_trio"]

LABEL = "trio-typha.churn"
MERGE_PATCH = "application/merge-patch+json"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


@dataclass(frozen=True)
class Mix:
    """Relative weights of the operations (0 disables one)."""

    create: float = 1.0
    update: float = 2.0
    delete: float = 1.0
    pod_label: float = 0.0
    namespace: float = 0.0

    @classmethod
    def parse(cls, text: str) -> Mix:
        """``create=1,update=2,delete=1,pod-label=1,namespace=1``; omitted weights are 0."""
        weights: dict[str, float] = dict.fromkeys(("create", "update", "delete", "pod_label",
                                                   "namespace"), 0.0)
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, raw = part.partition("=")
            key = name.strip().replace("-", "_")
            if not sep or key not in weights:
                raise ValueError(f"mix entry {part!r}: expected one of "
                                 f"create/update/delete/pod-label/namespace=WEIGHT")
            try:
                weights[key] = float(raw)
            except ValueError:
                raise ValueError(f"mix entry {part!r}: weight is not a number") from None
            if weights[key] < 0:
                raise ValueError(f"mix entry {part!r}: weight must not be negative")
        if not any(weights.values()):
            raise ValueError(f"mix {text!r} enables no operation")
        return cls(**weights)


@dataclass(frozen=True)
class ChurnConfig:
    rate: float = 10.0  # writes per second
    mix: Mix = field(default_factory=Mix)
    prefix: str = "churn"
    namespaces: int = 2  # policy namespaces <prefix>-0 ... made at set-up
    max_policies: int = 40  # in all namespaces together
    pods_per_namespace: int = 0  # placeholder pods for pod-label churn
    max_extra_namespaces: int = 3  # for namespace churn: <prefix>-ns-<n>
    seed: int | None = None

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise ValueError(f"rate must be positive, not {self.rate}")
        if self.namespaces < 1 or self.max_policies < 1:
            raise ValueError("namespaces and max_policies must be at least 1")


@dataclass(frozen=True)
class Write:
    """One request the churn made."""

    seq: int
    at: float  # time.time() just before the request (to line up with other processes)
    monotonic: float  # time.monotonic() at the same moment
    op: str  # create | update | delete
    kind: str  # NetworkPolicy | Pod | Namespace
    namespace: str
    name: str
    resource_version: str = ""  # as the server answered ("" for deletions and failures)
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error

    def as_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def api_client(kubeconfig: str | Path | None = None, context: str | None = None
               ) -> kubernetes.client.ApiClient:
    """An ``ApiClient`` for ``kubeconfig`` (default: ``$KUBECONFIG`` / ``~/.kube/config``),
    or the in-cluster service account when there is no kubeconfig at all."""
    cfg = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_kube_config(
            config_file=str(kubeconfig) if kubeconfig else None, context=context,
            client_configuration=cfg)
    except kubernetes.config.ConfigException:
        if kubeconfig or context:
            raise
        kubernetes.config.load_incluster_config(client_configuration=cfg)
    return kubernetes.client.ApiClient(cfg)


class Churn:
    """The generator (blocking; see the module docstring)."""

    def __init__(self, client: kubernetes.client.ApiClient, config: ChurnConfig, *,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.config = config
        self.core = kubernetes.client.CoreV1Api(client)
        self.net = kubernetes.client.NetworkingV1Api(client)
        self.rng = random.Random(config.seed)
        self.clock = clock
        self.wall = wall
        self.writes: list[Write] = []
        self.namespaces = [f"{config.prefix}-{i}" for i in range(config.namespaces)]
        self.policies: set[tuple[str, str]] = set()
        self.pods: list[tuple[str, str]] = []
        self.extra_namespaces: set[str] = set()
        self._serial = 0

    # -- set-up and clean-up ------------------------------------------------------------

    def setup(self) -> None:
        """Make the policy namespaces (and pods) and adopt this prefix's leftovers."""
        selector = f"{LABEL}={self.config.prefix}"
        existing = {ns.metadata.name for ns in
                    self.core.list_namespace(label_selector=selector).items}
        for ns in self.namespaces:
            if ns not in existing:
                self._write("create", "Namespace", "", ns, self.core.create_namespace,
                            self._namespace_body(ns))
        self.extra_namespaces = {n for n in existing if n not in self.namespaces}
        for ns in self.namespaces:
            for p in self.net.list_namespaced_network_policy(ns, label_selector=selector).items:
                self.policies.add((ns, p.metadata.name))
            pods = {p.metadata.name for p in
                    self.core.list_namespaced_pod(ns, label_selector=selector).items}
            for i in range(self.config.pods_per_namespace):
                name = f"pod-{i}"
                if name not in pods:
                    self._write("create", "Pod", ns, name, self.core.create_namespaced_pod,
                                ns, self._pod_body(name))
                self.pods.append((ns, name))
        self._serial = 1 + max((int(n.rpartition("-")[2]) for _, n in self.policies
                                if n.rpartition("-")[2].isdigit()), default=-1)

    def cleanup(self) -> None:
        """Delete every namespace this prefix owns (their policies and pods go with them)."""
        for ns in sorted({*self.namespaces, *self.extra_namespaces}):
            self._write("delete", "Namespace", "", ns, self.core.delete_namespace, ns)
        self.policies.clear()
        self.pods.clear()
        self.extra_namespaces.clear()

    # -- writes ---------------------------------------------------------------------------

    def step(self) -> Write:
        """Make one write, chosen by the mix among what the current state allows."""
        mix = self.config.mix
        choices = {"create": mix.create, "update": mix.update, "delete": mix.delete,
                   "pod_label": mix.pod_label if self.pods else 0.0,
                   "namespace": mix.namespace}
        if len(self.policies) >= self.config.max_policies:
            choices["create"] = 0.0
        if not self.policies:
            choices["update"] = choices["delete"] = 0.0
        if not any(choices.values()):
            choices["create"] = 1.0  # nothing to update or delete yet
        ops, weights = zip(*choices.items(), strict=True)
        op = self.rng.choices(ops, weights)[0]
        return getattr(self, f"_{op}")()

    def _create(self) -> Write:
        ns = self.rng.choice(self.namespaces)
        name = f"p-{self._serial}"
        self._serial += 1
        write = self._write("create", "NetworkPolicy", ns, name,
                            self.net.create_namespaced_network_policy, ns,
                            self._policy_body(name))
        if write.ok or write.error.startswith("HTTP 409"):
            self.policies.add((ns, name))
        return write

    def _update(self) -> Write:
        ns, name = self.rng.choice(sorted(self.policies))
        write = self._write("update", "NetworkPolicy", ns, name,
                            self.net.patch_namespaced_network_policy, name, ns,
                            {"spec": self._policy_spec()}, _content_type=MERGE_PATCH)
        if write.error.startswith("HTTP 404"):
            self.policies.discard((ns, name))  # someone else deleted it
        return write

    def _delete(self) -> Write:
        ns, name = self.rng.choice(sorted(self.policies))
        self.policies.discard((ns, name))
        return self._write("delete", "NetworkPolicy", ns, name,
                           self.net.delete_namespaced_network_policy, name, ns)

    def _pod_label(self) -> Write:
        ns, name = self.rng.choice(self.pods)
        labels = {"churn-gen": str(len(self.writes)), "tier": self.rng.choice(["a", "b", "c"])}
        return self._write("update", "Pod", ns, name, self.core.patch_namespaced_pod, name, ns,
                           {"metadata": {"labels": labels}}, _content_type=MERGE_PATCH)

    def _namespace(self) -> Write:
        extra = sorted(self.extra_namespaces)
        roll = self.rng.random()
        if extra and (roll < 1 / 3 or len(extra) >= self.config.max_extra_namespaces):
            ns = self.rng.choice(extra)
            self.extra_namespaces.discard(ns)
            return self._write("delete", "Namespace", "", ns, self.core.delete_namespace, ns)
        if extra and roll < 2 / 3:
            ns = self.rng.choice(extra)
            return self._write("update", "Namespace", "", ns, self.core.patch_namespace, ns,
                               {"metadata": {"labels": {"churn-gen": str(len(self.writes))}}},
                               _content_type=MERGE_PATCH)
        ns = f"{self.config.prefix}-ns-{self._serial}"
        self._serial += 1
        self.extra_namespaces.add(ns)
        return self._write("create", "Namespace", "", ns, self.core.create_namespace,
                           self._namespace_body(ns))

    def _write(self, op: str, kind: str, namespace: str, name: str,
               fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Write:
        at, mono = self.wall(), self.clock()
        rv = error = ""
        try:
            result = fn(*args, **kwargs)
            md = getattr(result, "metadata", None)
            rv = (getattr(md, "resource_version", None) or "") if op != "delete" else ""
        except kubernetes.client.ApiException as exc:
            error = f"HTTP {exc.status} {exc.reason}"
            if op == "delete" and exc.status == 404:
                error = ""  # already gone: the state we wanted
        except (urllib3.exceptions.HTTPError, OSError) as exc:  # no answer at all
            error = f"{type(exc).__name__}: {exc}"
        write = Write(len(self.writes), at, mono, op, kind, namespace, name, rv, error)
        self.writes.append(write)
        return write

    # -- pacing ---------------------------------------------------------------------------

    def schedule(self, start: float, *, seconds: float | None = None,
                 writes: int | None = None) -> Iterator[float]:
        """When each write is due: ``start + i / rate``, until ``seconds`` or ``writes``."""
        if seconds is None and writes is None:
            raise ValueError("say how long to run: seconds or writes")
        for i in range(writes) if writes is not None else itertools.count():
            due = start + i / self.config.rate
            if seconds is not None and due >= start + seconds:
                return
            yield due

    def run(self, *, seconds: float | None = None, writes: int | None = None,
            sleep: Callable[[float], None] = time.sleep) -> list[Write]:
        """Steps at ``config.rate`` until ``seconds`` have passed or ``writes`` were made;
        returns the writes of this run."""
        first = len(self.writes)
        for due in self.schedule(self.clock(), seconds=seconds, writes=writes):
            delay = due - self.clock()
            if delay > 0:
                sleep(delay)
            self.step()
        return self.writes[first:]

    def summary(self, writes: list[Write] | None = None) -> str:
        ws = self.writes if writes is None else writes
        if not ws:
            return "no writes"
        by = Counter(f"{w.kind}/{w.op}" for w in ws)
        errors = Counter(w.error for w in ws if w.error)
        span = ws[-1].monotonic - ws[0].monotonic
        rate = (len(ws) - 1) / span if span > 0 else float("nan")
        parts = [f"{len(ws)} writes in {span:.1f} s ({rate:.1f}/s)",
                 ", ".join(f"{k} {v}" for k, v in sorted(by.items()))]
        if errors:
            parts.append("errors: " + ", ".join(f"{k} x{v}" for k, v in errors.items()))
        return "; ".join(parts)

    # -- bodies ---------------------------------------------------------------------------

    def _namespace_body(self, name: str) -> dict[str, Any]:
        return k8s_namespace(name, labels={LABEL: self.config.prefix})

    def _pod_body(self, name: str) -> dict[str, Any]:
        return k8s_pod(name, "", labels={LABEL: self.config.prefix, "app": name},
                       containers=[{"name": "pause", "image": PAUSE_IMAGE}],
                       terminationGracePeriodSeconds=0)

    def _policy_body(self, name: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "labels": {LABEL: self.config.prefix}},
                "spec": self._policy_spec()}

    def _policy_spec(self) -> dict[str, Any]:
        rng = self.rng
        app = rng.choice(["web", "api", "db", "cache"])
        peer = {"podSelector": {"matchLabels": {"tier": rng.choice(["a", "b", "c"])}}}
        port = {"protocol": rng.choice(["TCP", "UDP"]), "port": rng.randrange(1024, 9000)}
        return {"podSelector": {"matchLabels": {"app": app}},
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [peer], "ports": [port]}]}


async def run_in_trio(churn: Churn, *, seconds: float | None = None,
                      writes: int | None = None) -> list[Write]:
    """:meth:`Churn.run` from trio: each write in a worker thread, paced by trio's clock."""
    import trio

    first = len(churn.writes)
    for due in churn.schedule(trio.current_time(), seconds=seconds, writes=writes):
        await trio.sleep_until(due)
        await trio.to_thread.run_sync(churn.step)
    return churn.writes[first:]


def _mix_arg(text: str) -> Mix:
    try:
        return Mix.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m testbed.churn",
                                description="NetworkPolicy churn with a record of every write.")
    p.add_argument("--kubeconfig", help="default: $KUBECONFIG, ~/.kube/config, in-cluster")
    p.add_argument("--context")
    p.add_argument("--rate", type=float, default=10.0, help="writes per second")
    p.add_argument("--seconds", type=float, help="how long (default: until --writes)")
    p.add_argument("--writes", type=int, help="how many writes")
    p.add_argument("--mix", type=_mix_arg, default=Mix(),
                   help="weights, e.g. create=1,update=2,delete=1,pod-label=1,namespace=1")
    p.add_argument("--prefix", default="churn")
    p.add_argument("--namespaces", type=int, default=2)
    p.add_argument("--max-policies", type=int, default=40)
    p.add_argument("--pods", type=int, default=0, help="placeholder pods per namespace")
    p.add_argument("--seed", type=int)
    p.add_argument("--record", type=Path, help="write every write as a JSON line here")
    p.add_argument("--cleanup", action="store_true", help="delete what it made at the end")
    args = p.parse_args(argv)
    if args.seconds is None and args.writes is None:
        p.error("give --seconds or --writes")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = ChurnConfig(rate=args.rate, mix=args.mix, prefix=args.prefix,
                             namespaces=args.namespaces, max_policies=args.max_policies,
                             pods_per_namespace=args.pods, seed=args.seed)
    except ValueError as exc:
        print(f"churn: {exc}", file=sys.stderr)
        return 2
    with api_client(args.kubeconfig, args.context) as client:
        churn = Churn(client, config)
        # With --cleanup the namespaces go whatever ends the run: its end, a failed write
        # that raised, a failed set-up, or Ctrl-C.
        try:
            churn.setup()
            try:
                run = churn.run(seconds=args.seconds, writes=args.writes)
            except KeyboardInterrupt:
                run = churn.writes
            print(churn.summary(run), file=sys.stderr)
        finally:
            if args.cleanup:
                churn.cleanup()
    if args.record:
        args.record.write_text("".join(w.as_json() + "\n" for w in churn.writes))
        print(f"recorded {len(churn.writes)} writes in {args.record}", file=sys.stderr)
    return 1 if any(w.error for w in churn.writes) else 0


if __name__ == "__main__":
    sys.exit(main())
