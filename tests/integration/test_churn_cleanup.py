"""``python -m testbed.churn --cleanup`` (what ``just churn`` runs) against the test bed API
server: the namespaces it made are gone when it ends, on its own or by Ctrl-C (SIGINT)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import kubernetes
import trio

from testbed import churn as ch
from testbed.apiserver import open_apiserver
from tests.deploy.deploy_render import ROOT
from tests.e2e.harness import HANG


def churn_namespaces(kubeconfig: Path) -> set[str]:
    with ch.api_client(kubeconfig, "testbed") as client:
        found = kubernetes.client.CoreV1Api(client).list_namespace(
            label_selector=f"{ch.LABEL}=churn").items
        return {ns.metadata.name for ns in found}


def wait_for_namespaces(kubeconfig: Path, count: int) -> None:
    """Blocks on a watch until ``count`` churn namespaces exist."""
    with ch.api_client(kubeconfig, "testbed") as client:
        seen: set[str] = set()
        stream = kubernetes.watch.Watch().stream(
            kubernetes.client.CoreV1Api(client).list_namespace,
            label_selector=f"{ch.LABEL}=churn", timeout_seconds=int(HANG))
        for event in stream:
            seen.add(event["object"].metadata.name)
            if len(seen) >= count:
                return


def churn_command(kubeconfig: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "testbed.churn", "--kubeconfig", str(kubeconfig),
            "--context", "testbed", "--cleanup", "--rate", "50",
            "--mix", "create=2,update=1,namespace=1", *args]


async def test_cleanup_after_the_run(tmp_path: Path) -> None:
    async with open_apiserver() as srv:
        kc = srv.kubeconfig_path(tmp_path)
        record = tmp_path / "writes.jsonl"
        done = await trio.run_process(
            churn_command(kc, "--writes", "30", "--record", str(record)), cwd=ROOT,
            capture_stderr=True, check=False)
        assert done.returncode == 0, done.stderr.decode()
        assert await trio.to_thread.run_sync(churn_namespaces, kc) == set()
        writes = [json.loads(line) for line in record.read_text().splitlines()]
        made = {w["name"] for w in writes if (w["op"], w["kind"]) == ("create", "Namespace")}
        gone = {w["name"] for w in writes[-len(made):] if w["op"] == "delete"}
        assert {"churn-0", "churn-1"} <= made and gone >= {"churn-0", "churn-1"}


async def test_cleanup_after_ctrl_c(tmp_path: Path) -> None:
    async with open_apiserver() as srv:
        kc = srv.kubeconfig_path(tmp_path)
        proc = await trio.lowlevel.open_process(churn_command(kc, "--seconds", "600"),
                                                cwd=ROOT, stderr=subprocess.PIPE)
        try:
            with trio.fail_after(HANG):
                await trio.to_thread.run_sync(wait_for_namespaces, kc, 2, abandon_on_cancel=True)
            proc.send_signal(signal.SIGINT)
            with trio.fail_after(HANG):
                await proc.wait()
        finally:
            if proc.returncode is None:
                proc.kill()
        assert await trio.to_thread.run_sync(churn_namespaces, kc) == set()
