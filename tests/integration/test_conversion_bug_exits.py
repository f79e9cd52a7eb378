"""A bug in a conversion ends the real daemon; no client is ever sent a withdrawal for it.

``trio-typha serve`` runs as its own process against a real etcd, with one bug put into the
GlobalNetworkPolicy conversion (a ``TypeError`` for policies of order 13; the wrapper below
replaces the function before the CLI starts).  A client syncs, then a policy it holds is
updated into the shape that hits the bug: the process exits non-zero with the traceback on
stderr, readiness stops answering, and the client saw no deletion of any key before its
connection ended.  The unit-level proof over every conversion function is
tests/unit/test_conversion_bugs.py.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import httpx
import pytest
import trio

from testbed.cluster import v3
from tests.etcd_server import free_port, run_etcd
from tests.internal_errors import internal_errors
from trio_typha.client.typha import TyphaClient, TyphaDisconnected
from trio_typha.model.kv import UpdateType

pytestmark = pytest.mark.etcd
ROOT = Path(__file__).resolve().parents[2]

INJECT = """
import sys
from trio_typha.model import syncers
real = syncers.policy_kvs
def policy_kvs(kind, key_name, policy):
    if policy.get("spec", {}).get("order") == 13:
        raise TypeError("a bug in the GlobalNetworkPolicy conversion")
    return real(kind, key_name, policy)
syncers.policy_kvs = policy_kvs
from trio_typha.cli import main
sys.exit(main(sys.argv[1:]))
"""


def gnp(name: str, order: int) -> dict[str, object]:
    return v3("GlobalNetworkPolicy", name, {"order": order, "selector": "all()"})


async def test_a_conversion_bug_exits_the_daemon_and_withdraws_nothing(tmp_path: Path) -> None:
    async with run_etcd(tmp_path) as etcd, etcd.client() as c:
        for name in ("p", "q"):
            await c.put_resource(gnp(name, 10))
        port, health = free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("TYPHA_")}
        env |= {"TYPHA_SERVERWORKERS": "1", "TYPHA_DATASTORETYPE": "etcdv3",
                "TYPHA_ETCDENDPOINTS": etcd.url}
        stderr = tmp_path / "stderr"
        with stderr.open("wb") as err:
            proc = await trio.lowlevel.open_process(
                [sys.executable, "-c", INJECT, "serve", "-c", os.devnull, "--host",
                 "127.0.0.1", "--port", str(port), "--health", "--health-host", "127.0.0.1",
                 "--health-port", str(health)], env=env, cwd=ROOT, stderr=err)
        try:
            async with httpx.AsyncClient(trust_env=False) as http:
                with trio.fail_after(60):
                    while True:
                        try:
                            r = await http.get(f"http://127.0.0.1:{health}/readiness")
                            if r.status_code == 200:
                                break
                        except httpx.TransportError:
                            pass
                        assert proc.returncode is None, stderr.read_text()
                        await trio.sleep(0.1)

                deleted: list[str] = []
                held: set[str] = set()
                async with TyphaClient(("127.0.0.1", port), syncer_type="felix") as client:
                    await client.wait_for_status()
                    held = set(client.kvs)
                    assert "/calico/v1/policy/GlobalNetworkPolicy//p" in held
                    await c.put_resource(gnp("p", 13))  # the bug
                    with trio.fail_after(60), pytest.raises(TyphaDisconnected):
                        async for batch in client.batches():
                            deleted += [u.key for u in batch.updates
                                        if u.update_type is UpdateType.DELETED]
                with trio.fail_after(60):
                    await proc.wait()
                assert deleted == []
                with pytest.raises(httpx.TransportError):
                    await http.get(f"http://127.0.0.1:{health}/readiness")
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        text = stderr.read_text()
        assert proc.returncode not in (0, None), text
        assert "Traceback" in text and "TypeError: a bug in the GlobalNetworkPolicy conversion" \
            in text, text
        assert "as absent" not in text  # not mistaken for a refused object
        assert internal_errors(text) == []  # nor caught by a bulkhead
