"""Real dataplane check (real clusters only): a deny-all NetworkPolicy, enforced by Felix from
what trio-typha sent it, stops pod-to-pod traffic; deleting it lets traffic through again."""

from __future__ import annotations

from typing import Any

import kubernetes
import trio

from testbed.cluster import k8s_namespace, k8s_pod
from tests.e2e.cluster import PATIENCE, RealCluster

NS = "trio-typha-e2e-traffic"
AGNHOST = "registry.k8s.io/e2e-test-images/agnhost:2.53"


def _pod(name: str, args: list[str], app: str) -> dict[str, Any]:
    return k8s_pod(name, NS, labels={"app": app}, terminationGracePeriodSeconds=0,
                   containers=[{"name": "agnhost", "image": AGNHOST, "args": args}])


DENY_ALL = {"metadata": {"name": "deny-all"},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}


async def deny_all_round_trip(cluster: RealCluster) -> None:
    core = kubernetes.client.CoreV1Api(cluster.api)
    net = kubernetes.client.NetworkingV1Api(cluster.api)

    def call(fn: Any, *args: Any) -> Any:
        return trio.to_thread.run_sync(lambda: fn(*args))

    await call(core.create_namespace, k8s_namespace(NS))
    try:
        await call(core.create_namespaced_pod, NS,
                   _pod("server", ["netexec", "--http-port=8080"], "server"))
        await call(core.create_namespaced_pod, NS, _pod("client", ["pause"], "client"))
        server_ip = await _running_ip(core, "server")
        await _running_ip(core, "client")

        async def connects() -> bool:
            out = await trio.run_process(
                [*cluster.kubectl, "-n", NS, "exec", "client", "--", "/agnhost", "connect",
                 f"{server_ip}:8080", "--timeout=2s"], check=False, capture_stdout=True,
                capture_stderr=True)
            return out.returncode == 0

        await _until(connects, True, "traffic flows before any policy")
        await call(net.create_namespaced_network_policy, NS, DENY_ALL)
        await _until(connects, False, "deny-all NetworkPolicy blocks traffic")
        await call(net.delete_namespaced_network_policy, "deny-all", NS)
        await _until(connects, True, "deleting the policy restores traffic")
    finally:
        await call(core.delete_namespace, NS)


async def _running_ip(core: kubernetes.client.CoreV1Api, name: str) -> str:
    with trio.fail_after(PATIENCE):
        while True:
            pod = await trio.to_thread.run_sync(lambda: core.read_namespaced_pod(name, NS))
            if pod.status.phase == "Running" and pod.status.pod_ip:
                return str(pod.status.pod_ip)
            await trio.sleep(1)


async def _until(check: Any, want: bool, what: str) -> None:
    # Polling the real dataplane: nothing signals when Felix has programmed a policy.
    with trio.move_on_after(PATIENCE):
        while True:
            if await check() is want:
                return
            await trio.sleep(1)
    raise AssertionError(f"not within {PATIENCE:.0f} s: {what}")
