"""etcd over gRPC against real etcd processes: one connection shared by every syncer's watch
(a stall of one watch stream resets that stream alone), failover between the members of a
3-member cluster, and leader loss (``hasleader``)."""

from __future__ import annotations

import logging
import random
from functools import partial
from pathlib import Path

import pytest
import trio

from tests.etcd_server import EtcdClient, EtcdServer, run_etcd, run_etcd_cluster
from tests.fault_proxy import open_fault_proxy
from tests.h2_stream_proxy import open_h2_stream_proxy
from tests.integration.test_etcd_watcher import KINDS, Recorder, gnp, start_watcher
from trio_typha.datastore.base import Connection, DatastoreEvent
from trio_typha.datastore.etcd import EtcdDatastore
from trio_typha.datastore.etcd_config import EtcdConfig
from trio_typha.datastore.etcd_errors import EtcdError
from trio_typha.datastore.etcd_rpc import WATCH_PATH
from trio_typha.model import kinds as K

pytestmark = pytest.mark.etcd


async def test_every_syncers_watch_shares_one_connection(tmp_path: Path) -> None:
    async with run_etcd(tmp_path) as etcd, etcd.client() as c, \
            open_fault_proxy(etcd.client_port) as proxy:
        await c.put_resource(gnp("a"))
        ds = EtcdDatastore(EtcdConfig(endpoints=(f"http://127.0.0.1:{proxy.port}/",)),
                           rng=random.Random(1))
        async with trio.open_nursery() as nursery:
            await nursery.start(ds.run)
            recorders = []
            for name in ("felix", "bgp", "tunnel-ip-allocation"):
                send, recv = trio.open_memory_channel[DatastoreEvent](100)
                rec = Recorder()
                nursery.start_soon(rec.consume, recv)
                await nursery.start(partial(ds.watch, KINDS, send, name=name))
                recorders.append(rec)
            for rec in recorders:
                await rec.wait_synced()
            await c.put_resource(gnp("b"))
            for rec in recorders:
                await rec.wait_matches(c)
            # Three watches, six ranges, three status calls: one TCP connection.
            assert proxy.connections == 1
            nursery.cancel_scope.cancel()


async def test_a_stalled_watch_stream_is_reset_alone_and_the_other_watches_keep_going(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """One watch stream of the shared connection stops delivering (its DATA withheld by
    the proxy: etcd's replies, the answers to its progress requests) while the connection,
    its PINGs and the other syncers' streams keep working: that stream alone is reset and
    the watch resumed from its last revision on a new stream of the same connection."""
    caplog.set_level(logging.INFO, logger="trio_typha.datastore")
    watch = WATCH_PATH.decode()
    async with run_etcd(tmp_path) as etcd, etcd.client() as c, \
            open_h2_stream_proxy(etcd.client_port) as proxy:
        for name in ("stays", "doomed"):
            await c.put_resource(gnp(name))
        ds = EtcdDatastore(EtcdConfig(endpoints=(f"http://127.0.0.1:{proxy.port}/",)),
                           stall_deadline=1.5, rng=random.Random(1))
        async with trio.open_nursery() as nursery:
            await nursery.start(ds.run)
            recorders: dict[str, Recorder] = {}
            for name in ("felix", "bgp", "tunnel-ip-allocation"):
                send, recv = trio.open_memory_channel[DatastoreEvent](100)
                rec = recorders[name] = Recorder()
                nursery.start_soon(rec.consume, recv)
                await nursery.start(partial(ds.watch, KINDS, send, name=name))
                await rec.wait_synced()
                with trio.fail_after(20):  # so the first Watch stream is felix's
                    await proxy.wait_for(watch, len(recorders))
            felix, *others = proxy.matching(watch)
            proxy.stall(felix)
            await c.delete_resource(K.calico_kind("GlobalNetworkPolicy"), "", "doomed")
            for name in ("bgp", "tunnel-ip-allocation"):
                await recorders[name].wait_matches(c)  # delivered beside the stalled stream
            await recorders["felix"].wait_matches(c)  # the deletion, on the new stream
            await c.put_resource(gnp("after"))
            for rec in recorders.values():
                await rec.wait_matches(c)
            stalls = [r.getMessage() for r in caplog.records if "stalled" in r.getMessage()]
            print(stalls)
            assert len(stalls) == 1
            assert stalls[0].startswith("etcd watch felix/etcd stalled: nothing delivered for")
            assert "the connection answers PINGs: resuming from revision" in stalls[0]
            # felix's stream reset by the client, the others untouched, one TCP connection.
            assert felix.reset_by_client and felix.dropped >= 1 and proxy.credit_returned > 0
            assert [s.reset_by_client for s in others] == [False, False]
            assert len(proxy.matching(watch)) == 4
            assert proxy.accepted == 1
            # Nothing lost, nothing listed again, no outage reported for any syncer.
            listed = [r for r in caplog.records if r.getMessage().startswith("Listed ")]
            assert len(listed) == 3
            assert all(rec.connections() == [True] for rec in recorders.values())
            nursery.cancel_scope.cancel()


async def wait_for_leader_other_than(member: EtcdServer, gone: int) -> None:
    """Until ``member`` follows a live leader: a write proposed while the killed member
    still led is lost with it and only times out, so the stimulus waits for the election."""
    with trio.fail_after(30):
        while True:
            try:
                async with EtcdClient(member.config).client() as g:
                    leader = (await g.status()).leader
            except EtcdError:  # "no leader" while the election runs
                leader = 0
            if leader not in (0, gone):
                return
            await trio.sleep(0.05)


async def test_failover_to_another_member_resumes_without_relisting(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="trio_typha.datastore")
    async with run_etcd_cluster(tmp_path, 3) as members:
        c = EtcdClient(members[1].config)
        await c.put_resource(gnp("before"))
        endpoints = tuple(m.url + "/" for m in members)
        async with trio.open_nursery() as nursery:
            rec = await start_watcher(nursery, EtcdConfig(endpoints=endpoints))
            await rec.wait_synced()
            await rec.wait_matches(c)
            async with EtcdClient(members[0].config).client() as g:
                killed = (await g.status()).header.member_id
            await members[0].kill()  # the member the watch is on
            await wait_for_leader_other_than(members[1], killed)
            await c.put_resource(gnp("after"))
            await rec.wait_matches(c)
            await rec.wait_for(lambda: rec.connections()[-2:] == [False, True])
            lost = [e.reason for e in rec.events if isinstance(e, Connection) and not e.ok]
            assert members[0].url in lost[0]
            # Same cluster, same revisions: the watch resumed where it was, no relist.
            listed = [r for r in caplog.records if r.getMessage().startswith("Listed ")]
            assert len(listed) == 1
            nursery.cancel_scope.cancel()


async def test_leader_loss_ends_the_watch_until_quorum_returns(tmp_path: Path) -> None:
    async with run_etcd_cluster(tmp_path, 3) as members:
        c = EtcdClient(members[0].config)
        await c.put_resource(gnp("before"))
        async with trio.open_nursery() as nursery:
            # Only the member that will be left without a leader: nowhere to fail over to.
            rec = await start_watcher(nursery, members[0].config, request_timeout=2.0)
            await rec.wait_synced()
            await rec.wait_for(lambda: rec.connections() == [True])
            for member in members[1:]:
                await member.stop()
            # etcd cancels the streams that asked for a leader (hasleader) once it has
            # none; the status call of a new session then fails the same way.
            await rec.wait_for(lambda: rec.connections()[-1:] == [False])
            lost = [e.reason for e in rec.events if isinstance(e, Connection) and not e.ok]
            print(f"leader loss ended the session: {lost[0]}")
            assert "etcdserver: no leader" in lost[0]
            for member in members[1:]:
                await member.launch()
            for member in members[1:]:
                await member.wait_ready()
            await rec.wait_for(lambda: rec.connections()[-1:] == [True])
            await c.put_resource(gnp("after"))
            await rec.wait_matches(c)
            nursery.cancel_scope.cancel()


async def test_a_quiet_watch_stays_up_on_answered_progress_requests(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="trio_typha.datastore")
    async with run_etcd(tmp_path) as etcd, etcd.client() as c, \
            open_fault_proxy(etcd.client_port) as proxy:
        await c.put_resource(gnp("a"))
        deadline = 1.5
        config = EtcdConfig(endpoints=(f"http://127.0.0.1:{proxy.port}/",))
        async with trio.open_nursery() as nursery:
            rec = await start_watcher(nursery, config, stall_deadline=deadline)
            await rec.wait_synced()
            await rec.wait_for(lambda: rec.connections() == [True])
            await trio.sleep(4 * deadline)  # nothing changes in etcd meanwhile
            # etcd answered every progress request: no stall, no reconnect, one connection.
            assert rec.connections() == [True]
            assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
            assert proxy.connections == 1
            await c.put_resource(gnp("b"))
            await rec.wait_matches(c)
            nursery.cancel_scope.cancel()
