"""Byte compatibility with Go: reference streams written by Go's encoding/gob and
github.com/golang/snappy (tests/gotools), read and reproduced by the Python codec, and a Go
client against the real trio server on loopback.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_typha.cache.feed import CacheFeed
from trio_typha.model.kv import SYNCER_TYPES, SerializedUpdate, SyncStatus, UpdateType
from trio_typha.protocols.gob import encode_once, snappy
from trio_typha.protocols.gob.client_session import ClientSession
from trio_typha.protocols.gob.codec import (
    BOOL,
    BYTES,
    INT,
    NEED_DATA,
    STRING,
    UINT,
    Decoder,
    Encoder,
    TypeIds,
)
from trio_typha.protocols.gob.gotime import GoTime
from trio_typha.protocols.gob.messages import (
    ENVELOPE,
    REGISTRY,
    Envelope,
    MsgACK,
    MsgClientHello,
    MsgDecoderRestart,
    MsgKVs,
    MsgPing,
    MsgPong,
    MsgServerHello,
    MsgSyncStatus,
    go_text,
)
from trio_typha.protocols.gob.shell import serve_gob_connection
from trio_typha.sessions.context import ServerContext
from trio_typha.sessions.settings import ServerSettings

pytestmark = pytest.mark.go

GOTOOLS = Path(__file__).resolve().parents[1] / "gotools"
# Values Python's model cannot hold (a Revision that is not a string), so only decoded.
DECODE_ONLY = {"revisions"}


@pytest.fixture(scope="session")
def gobtool() -> Path:
    done = subprocess.run(["bash", str(GOTOOLS / "build.sh")], check=True, capture_output=True,
                          text=True, timeout=600)
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def vectors(gobtool: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("gob-vectors")
    subprocess.run([str(gobtool), "vectors", str(out)], check=True, timeout=60,
                   env={**os.environ, "TZ": "UTC"})
    return out, json.loads((out / "manifest.json").read_text())


# --- Python messages <-> the Go tool's JSON descriptions


def _time_desc(t: GoTime) -> str:
    return t.marshal_binary().hex()


def describe(msg: object) -> dict[str, Any]:
    """The Go tool's description format, for a decoded Python message."""
    if msg is None:
        return {"type": None}
    if isinstance(msg, MsgClientHello):
        return {"type": "MsgClientHello", "Hostname": msg.hostname, "Info": msg.info,
                "Version": msg.version, "SyncerType": msg.syncer_type,
                "SupportsDecoderRestart": msg.supports_decoder_restart,
                "SupportedCompressionAlgorithms": list(msg.supported_compression_algorithms),
                "SupportsModernPolicyKeys": msg.supports_modern_policy_keys,
                "ClientConnID": msg.client_conn_id}
    if isinstance(msg, MsgServerHello):
        return {"type": "MsgServerHello", "Version": msg.version, "SyncerType": msg.syncer_type,
                "SupportsNodeResourceUpdates": msg.supports_node_resource_updates,
                "ServerConnID": msg.server_conn_id}
    if isinstance(msg, MsgDecoderRestart):
        return {"type": "MsgDecoderRestart", "Message": msg.message,
                "CompressionAlgorithm": msg.compression_algorithm}
    if isinstance(msg, MsgACK):
        return {"type": "MsgACK"}
    if isinstance(msg, MsgSyncStatus):
        return {"type": "MsgSyncStatus", "SyncStatus": int(msg.sync_status)}
    if isinstance(msg, MsgPing):
        return {"type": "MsgPing", "Timestamp": _time_desc(msg.timestamp)}
    if isinstance(msg, MsgPong):
        return {"type": "MsgPong", "PingTimestamp": _time_desc(msg.ping_timestamp),
                "PongTimestamp": _time_desc(msg.pong_timestamp)}
    if isinstance(msg, MsgKVs):
        return {"type": "MsgKVs", "KVs": [
            {"Key": u.key, "Value": (u.value or b"").hex(), "ValueNil": u.value is None,
             "Revision": u.revision, "V3ResourceVersion": u.v3_resource_version,
             "TTL": u.ttl_ns, "UpdateType": int(u.update_type)} for u in msg.kvs]}
    return {"type": "int", "text": go_text(msg)}


def normalize_go(desc: dict[str, Any]) -> dict[str, Any]:
    """Go's description in the comparable form (times as bytes, Revision as Go text)."""
    desc = dict(desc)
    for field in ("Timestamp", "PingTimestamp", "PongTimestamp"):
        if field in desc:
            desc[field] = desc[field]["bin"]
    if desc.get("type") == "MsgKVs":
        desc["KVs"] = [{**u, "Revision": "<nil>" if u["Revision"] is None
                        else u["Revision"]["text"]} for u in desc["KVs"]]
    return desc


def build(desc: dict[str, Any]) -> object:
    """A Python message from the Go tool's description (independent of our decoder)."""
    kind = desc["type"]
    if kind is None:
        return None
    if kind == "int":
        return int(desc["text"])
    if kind == "MsgClientHello":
        return MsgClientHello(desc["Hostname"], desc["Info"], desc["Version"],
                              desc["SyncerType"], desc["SupportsDecoderRestart"],
                              tuple(desc["SupportedCompressionAlgorithms"]),
                              desc["SupportsModernPolicyKeys"], desc["ClientConnID"])
    if kind == "MsgServerHello":
        return MsgServerHello(desc["Version"], desc["SyncerType"],
                              desc["SupportsNodeResourceUpdates"], desc["ServerConnID"])
    if kind == "MsgDecoderRestart":
        return MsgDecoderRestart(desc["Message"], desc["CompressionAlgorithm"])
    if kind == "MsgACK":
        return MsgACK()
    if kind == "MsgSyncStatus":
        return MsgSyncStatus(SyncStatus(desc["SyncStatus"]))
    if kind == "MsgPing":
        return MsgPing(_go_time(desc["Timestamp"]))
    if kind == "MsgPong":
        return MsgPong(_go_time(desc["PingTimestamp"]), _go_time(desc["PongTimestamp"]))
    if kind == "MsgKVs":
        return MsgKVs(tuple(SerializedUpdate(
            u["Key"], None if u["ValueNil"] else bytes.fromhex(u["Value"]),
            "<nil>" if u["Revision"] is None else u["Revision"]["text"], u["V3ResourceVersion"],
            u["TTL"], UpdateType(u["UpdateType"]))
            for u in desc["KVs"]))
    raise AssertionError(f"unknown message type {kind}")


def _go_time(d: dict[str, Any]) -> GoTime:
    if d["zero"] and d["utc"]:
        return GoTime(0, 0, None)
    return GoTime.from_unix_ns(d["unix"] * 10**9 + d["nsec"], None if d["utc"] else d["offset"])


def decode_stream(data: bytes, root: Any = ENVELOPE) -> list[Any]:
    dec = Decoder(REGISTRY, root, max_message_size=1 << 30)
    dec.feed(data)
    out = []
    while (v := dec.next_value()) is not NEED_DATA:
        out.append(v)
    assert dec.buffered == 0
    return out


# --- reference streams from Go


def test_go_numbers_user_types_from_64(vectors: tuple[Path, dict]) -> None:
    out, manifest = vectors
    data = (out / "client_hello_modern.gob").read_bytes()
    # First message: length 0x21, then int -64 (0x7f): the definition of type 64, Envelope.
    assert data[:2] == b"\x21\x7f"
    assert manifest["go_version"].startswith("go1.")


def test_python_decodes_every_go_vector(vectors: tuple[Path, dict]) -> None:
    out, manifest = vectors
    for vector in manifest["vectors"]:
        decoded = decode_stream((out / vector["file"]).read_bytes())
        assert [describe(e.message) for e in decoded] == [
            normalize_go(d) for d in vector["messages"]], vector["name"]


def test_python_encoder_reproduces_go_bytes(vectors: tuple[Path, dict]) -> None:
    out, manifest = vectors
    ids = TypeIds()  # like Go's process-global table: the vectors share one, in order
    checked = 0
    for vector in manifest["vectors"]:
        enc = Encoder(REGISTRY, ids)
        data = b"".join(enc.encode(Envelope(build(d)), ENVELOPE) for d in vector["messages"])
        if vector["name"] in DECODE_ONLY:
            continue
        assert data == (out / vector["file"]).read_bytes(), vector["name"]
        checked += 1
    assert checked == len(manifest["vectors"]) - len(DECODE_ONLY)


def test_singletons(vectors: tuple[Path, dict]) -> None:
    out, manifest = vectors
    types = {"int": INT, "uint": UINT, "string": STRING, "bytes": BYTES, "bool": BOOL}
    for single in manifest["singletons"]:
        data = (out / single["file"]).read_bytes()
        value = bytes.fromhex(single["value"]) if single["kind"] == "bytes" else single["value"]
        assert decode_stream(data, root=None) == [value], single["name"]
        assert Encoder(REGISTRY).encode(value, types[single["kind"]]) == data, single["name"]


def test_time_layouts(vectors: tuple[Path, dict]) -> None:
    _, manifest = vectors
    for t in manifest["times"]:
        ours = _go_time({"zero": t["unix"] == -62135596800 and t["nsec"] == 0 and t["utc"], **t})
        assert ours.marshal_binary().hex() == t["bin"], t["name"]
        back = GoTime.unmarshal_binary(bytes.fromhex(t["bin"]))
        assert back.offset == (None if t["decoded_utc"] else t["decoded_offset"]), t["name"]
        assert back.marshal_binary().hex() == t["reencoded"], t["name"]


def test_snappy_streams_from_go(vectors: tuple[Path, dict]) -> None:
    out, manifest = vectors
    for vec in manifest["snappy"]:
        data = (out / vec["output"]).read_bytes()
        reader = snappy.FrameReader()
        reader.feed(data)
        got = b""
        while (chunk := reader.next_chunk()) is not None:
            got += chunk
        assert got == (out / vec["input"]).read_bytes(), vec["name"]
    # Go stores tiny chunks uncompressed, as we do: byte-identical framing.
    status = next(v for v in manifest["snappy"] if v["name"] == "status_msg")
    assert snappy.stream((out / status["input"]).read_bytes()) == (
        out / status["output"]).read_bytes()


# --- Go decoding what Python writes


def go_decode(gobtool: Path, tmp_path: Path, data: bytes, *, compressed: bool = False,
              ) -> list[dict[str, Any]]:
    path = tmp_path / "stream.bin"
    path.write_bytes(data)
    args = [str(gobtool), "decode", *(["-snappy"] if compressed else []), str(path)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return [normalize_go(json.loads(line)) for line in done.stdout.splitlines()]


SERVER_MESSAGES: list[object] = [
    MsgServerHello("v3.32.1", "felix", True, 0x1234567800000001),
    MsgDecoderRestart("enable compression: snappy;send binary snapshot", "snappy"),
    MsgKVs((SerializedUpdate("/calico/v1/config/foobar", b"baz", "1234"),
            SerializedUpdate("/calico/resources/v3/projectcalico.org/nodes/n1", b'{"a":1}', "",
                             "987", 0, UpdateType.UPDATED),
            SerializedUpdate("/calico/v1/config/ttl", b"\x00\xff", "5", "", -90 * 10**9,
                             UpdateType.NEW),
            SerializedUpdate("/calico/v1/config/gone", None, "7",
                             update_type=UpdateType.DELETED))),
    MsgKVs(()),
    *(MsgSyncStatus(s) for s in SyncStatus),
    MsgPing(GoTime.from_unix_ns(1_700_000_000 * 10**9 + 5, 0)),
    MsgPing(GoTime.from_unix_ns(1_700_000_000 * 10**9 + 5, None)),
    MsgPing(GoTime.from_unix_ns(-5 * 10**17, 19800)),
]


def test_go_decodes_the_server_stream(gobtool: Path, tmp_path: Path) -> None:
    data = encode_once.STREAM_PREFIX + b"".join(encode_once.encode(m) for m in SERVER_MESSAGES)
    assert go_decode(gobtool, tmp_path, data) == [describe(m) for m in SERVER_MESSAGES]


def test_go_decodes_the_compressed_snapshot(gobtool: Path, tmp_path: Path) -> None:
    snapshot = tuple(SerializedUpdate(f"/calico/v1/k{i:05d}", os.urandom(i % 300 + 1), str(i))
                     for i in range(2500))
    got = go_decode(gobtool, tmp_path, encode_once.build_compressed_snapshot(snapshot),
                    compressed=True)
    assert [len(m["KVs"]) for m in got[:-1]] == [1000, 1000, 500]
    assert got[-1] == describe(MsgDecoderRestart("End of compressed snapshot.", "snappy"))
    assert [kv for m in got[:-1] for kv in m["KVs"]] == describe(MsgKVs(snapshot))["KVs"]


def test_go_decodes_the_python_client_stream(gobtool: Path, tmp_path: Path) -> None:
    core = ClientSession(syncer_type="bgp", hostname="n1", info="i", version="v", conn_id=42)
    stamp = GoTime.from_unix_ns(1_700_000_000 * 10**9 + 5, 0)
    # A restart to a new plain stream, which starts with its own definitions.
    restart = encode_once.STREAM_PREFIX + encode_once.encode(MsgServerHello("v", "bgp", True, 1)) \
        + encode_once.encode(MsgDecoderRestart("x", "")) + encode_once.STREAM_PREFIX \
        + encode_once.encode(MsgPing(stamp))
    core.receive_data(restart)
    assert go_decode(gobtool, tmp_path, core.data_to_send()) == [
        describe(MsgClientHello("n1", "i", "v", "bgp", True, ("snappy",), True, 42)),
        describe(MsgACK()), describe(MsgPong(stamp))]


# --- a Go client against the trio server


def digest(kvs: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for key in sorted(kvs):
        h.update(key.encode() + b"\x00" + kvs[key] + b"\n")
    return h.hexdigest()


async def serve(nursery: trio.Nursery, ctx: ServerContext) -> int:
    handler = functools.partial(serve_gob_connection, ctx=ctx, peer="go")
    listeners = await nursery.start(functools.partial(trio.serve_tcp, handler, 0,
                                                      host="127.0.0.1"))
    return listeners[0].socket.getsockname()[1]


def make_ctx(kvs: int) -> ServerContext:
    feeds = {t: CacheFeed(t) for t in SYNCER_TYPES}
    for feed in feeds.values():
        feed.set_status(SyncStatus.IN_SYNC)
    feeds["felix"].apply([SerializedUpdate(f"/calico/v1/k{i:05d}", b"v%d" % i * 20, str(i))
                          for i in range(kvs)])
    return ServerContext(feeds=feeds, settings=ServerSettings(ping_interval=0.2),
                         version="v-test")


async def run_go_client(gobtool: Path, port: int, *args: str,
                        on_in_sync: Any = None) -> dict[str, Any]:
    cmd = [str(gobtool), "client", "-addr", f"127.0.0.1:{port}", "-timeout", "30s", *args]
    async with trio.open_nursery() as nursery:
        proc = await nursery.start(functools.partial(
            trio.run_process, cmd, stdout=subprocess.PIPE, check=False))
        buf = b""
        async for chunk in proc.stdout:
            buf += chunk
            if on_in_sync is not None and b'"in-sync"' in buf:
                on_in_sync()
                on_in_sync = None
    return json.loads(buf.decode().splitlines()[-1])


@pytest.mark.parametrize("legacy", [False, True])
async def test_go_client_snapshot_deltas_and_pings(gobtool: Path, legacy: bool) -> None:
    ctx = make_ctx(kvs=2500)
    feed = ctx.feeds["felix"]

    def churn() -> None:
        feed.apply([SerializedUpdate("/calico/v1/new", b"n", "9"),
                    SerializedUpdate("/calico/v1/k00001", None, "10",
                                     update_type=UpdateType.DELETED),
                    SerializedUpdate("/calico/v1/k00002", b"changed", "11",
                                     update_type=UpdateType.UPDATED)])

    async with trio.open_nursery() as nursery:
        port = await serve(nursery, ctx)
        summary = await run_go_client(gobtool, port, "-expect-deltas", "3", "-expect-pings", "2",
                                      *(["-legacy"] if legacy else []), on_in_sync=churn)
        nursery.cancel_scope.cancel()
    assert summary["event"] == "done", summary
    assert summary["server_hello"] == {"type": "MsgServerHello", "Version": "v-test",
                                       "SyncerType": "felix", "SupportsNodeResourceUpdates": True,
                                       "ServerConnID": summary["server_hello"]["ServerConnID"]}
    assert summary["server_hello"]["ServerConnID"] != 0
    if legacy:
        assert summary["restarts"] == [] and summary["snapshot_max_batch"] == 100
    else:
        assert [r["Message"] for r in summary["restarts"]] == [
            "enable compression: snappy;send binary snapshot", "End of compressed snapshot."]
        assert summary["snapshot_max_batch"] == 1000
    assert summary["snapshot_kvs"] == 2500 and summary["snapshot_sorted"]
    assert summary["snapshot_all_new"]
    assert summary["statuses"] == [2] and summary["deltas"] == 3 and summary["pings"] >= 2
    expected = {u.key: u.value for u in feed.latest.snapshot()}
    assert summary["kvs"] == len(expected) == 2500
    assert summary["digest"] == digest(expected)


async def test_go_client_large_snapshot_built_off_the_event_loop(gobtool: Path) -> None:
    # Big enough for the server to encode the shared snapshot in a worker thread.
    ctx = make_ctx(kvs=25_000)
    async with trio.open_nursery() as nursery:
        port = await serve(nursery, ctx)
        results: list[dict[str, Any]] = []

        async def one() -> None:
            results.append(await run_go_client(gobtool, port))
        async with trio.open_nursery() as clients:
            clients.start_soon(one)
            clients.start_soon(one)
        nursery.cancel_scope.cancel()
    assert len(results) == 2
    expected = {u.key: u.value for u in ctx.feeds["felix"].latest.snapshot()}
    for summary in results:
        assert summary["event"] == "done", summary
        assert summary["snapshot_kvs"] == 25_000 and summary["digest"] == digest(expected)


@pytest.mark.parametrize("syncer", ["", *SYNCER_TYPES])
async def test_go_client_each_syncer_type(gobtool: Path, syncer: str) -> None:
    ctx = make_ctx(kvs=3)
    async with trio.open_nursery() as nursery:
        port = await serve(nursery, ctx)
        summary = await run_go_client(gobtool, port, "-syncer", syncer)
        nursery.cancel_scope.cancel()
    assert summary["event"] == "done", summary
    assert summary["server_hello"]["SyncerType"] == (syncer or "felix")
    assert summary["kvs"] == (3 if syncer in ("", "felix") else 0)


@pytest.mark.parametrize("args", [["-no-modern-keys"], ["-syncer", "garbage"]])
async def test_go_client_rejected_without_reply(gobtool: Path, args: list[str]) -> None:
    ctx = make_ctx(kvs=3)
    async with trio.open_nursery() as nursery:
        port = await serve(nursery, ctx)
        summary = await run_go_client(gobtool, port, *args)
        nursery.cancel_scope.cancel()
    assert summary["event"] == "error"
    assert summary["error"] == "decode: EOF" and summary.get("server_hello") is None


# --- a Go client against the whole daemon (memory datastore, byte-exact model, both
# protocols on one port)


@pytest.mark.parametrize("syncer", SYNCER_TYPES)
async def test_go_client_against_the_daemon(gobtool: Path, syncer: str) -> None:
    from trio_typha.config_sources import load_config
    from trio_typha.daemon import Daemon
    from trio_typha.datastore.memory import MemoryStore
    from trio_typha.datastore.synthetic import generate

    store = MemoryStore()
    store.put_all(generate("tiny"))
    cfg = load_config({}, config_file=None,
                      overrides={"DatastoreType": "memory", "ServerHost": "127.0.0.1", "ServerWorkers": "1"})
    async with trio.open_nursery() as nursery:
        daemon = await nursery.start(Daemon(cfg, store=store, listen_port=0).run)
        with trio.fail_after(10):
            await daemon.wait_in_sync()
        summary = await run_go_client(gobtool, daemon.ports["server"], "-syncer", syncer)
        expected = daemon.pipelines[syncer].feed.cache.values_by_key()
        daemon.shutdown()
    assert summary["event"] == "done", summary
    assert summary["statuses"] == [2] and summary["snapshot_sorted"]
    assert summary["kvs"] == len(expected) > 0
    assert summary["digest"] == digest(expected)



async def read_json_line(stream: trio.abc.ReceiveStream, buf: bytearray) -> dict[str, Any]:
    while b"\n" not in buf:
        chunk = await stream.receive_some()
        assert chunk, f"stream ended before a line: {bytes(buf)!r}"
        buf += chunk
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return json.loads(line)


@contextlib.asynccontextmanager
async def tiny_daemon(store: Any, **overrides: str) -> AsyncIterator[Any]:
    """A one-process daemon (every fleet member in this process) on the memory datastore
    holding ``store``, in sync; shut down on exit."""
    from trio_typha.config_sources import load_config
    from trio_typha.daemon import Daemon

    cfg = load_config({}, config_file=None, overrides={
        "DatastoreType": "memory", "ServerHost": "127.0.0.1", "ServerWorkers": "1",
        **overrides})
    async with trio.open_nursery() as nursery:
        daemon = await nursery.start(Daemon(cfg, store=store, listen_port=0).run)
        with trio.fail_after(10):
            await daemon.wait_in_sync()
        yield daemon
        daemon.shutdown()


def tiny_store() -> Any:
    from trio_typha.datastore.memory import MemoryStore
    from trio_typha.datastore.synthetic import generate

    store = MemoryStore()
    store.put_all(generate("tiny"))
    return store


async def test_go_fleet_against_the_daemon(gobtool: Path) -> None:
    # The benchmark's client fleet (bench/fanout.py --client-impl go): five connections in
    # one process, an in_sync line once all are in sync, a done line when stdin closes.
    async with tiny_daemon(tiny_store()) as daemon:
        keys = len(daemon.pipelines["felix"].feed.cache)
        cmd = [str(gobtool), "fleet", "-addr", f"127.0.0.1:{daemon.ports['server']}", "-n", "5"]
        buf = bytearray()
        with trio.fail_after(10):
            async with trio.open_nursery() as fleet:
                proc = await fleet.start(functools.partial(
                    trio.run_process, cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    check=False))
                in_sync = await read_json_line(proc.stdout, buf)
                assert len(daemon.ctx.sessions) == 5
                await proc.stdin.aclose()
                done = await read_json_line(proc.stdout, buf)
    assert proc.returncode == 0
    assert in_sync["event"] == "in_sync" and in_sync["errors"] == []
    assert in_sync["seconds"] > 0
    assert done["event"] == "done" and done["errors"] == [] and done["delays"] == []
    assert keys > 0 and done["updates"] >= 5 * keys


async def test_go_fleet_over_mtls_gets_every_churned_update(
        gobtool: Path, tmp_path: Path) -> None:
    """Go's crypto/tls clients (the fleet with -ca/-cert/-key) against the daemon's mutual
    TLS: in sync, then every churned pod reaches every member through the TLS broadcast."""
    import trustme

    from trio_typha.datastore.churn import Churn

    ca = trustme.CA()
    files = {"ca": ca.cert_pem}
    server = ca.issue_cert("typha-server")
    client = ca.issue_cert("typha-client", common_name="typha-client")
    files |= {"server_cert": server.cert_chain_pems[0], "server_key": server.private_key_pem,
              "client_cert": client.cert_chain_pems[0], "client_key": client.private_key_pem}
    paths = {name: str(tmp_path / f"{name}.pem") for name in files}
    for name, blob in files.items():
        blob.write_to_path(paths[name])
    store = tiny_store()
    members = 4
    async with tiny_daemon(store, ServerCertFile=paths["server_cert"],
                           ServerKeyFile=paths["server_key"], CAFile=paths["ca"],
                           ClientCN="typha-client") as daemon:
        cmd = [str(gobtool), "fleet", "-addr", f"127.0.0.1:{daemon.ports['server']}",
               "-n", str(members), "-ca", paths["ca"], "-cert", paths["client_cert"],
               "-key", paths["client_key"], "-server-name", "typha-server"]
        buf = bytearray()
        with trio.fail_after(20):
            async with trio.open_nursery() as fleet:
                proc = await fleet.start(functools.partial(
                    trio.run_process, cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    check=False))
                in_sync = await read_json_line(proc.stdout, buf)
                assert len(daemon.ctx.sessions) == members
                assert all(s.tls_identity == "CN=typha-client"
                           for s in daemon.ctx.registry)
                churn = Churn(store, 50, policy_fraction=0.0)
                with trio.move_on_after(1):
                    await churn.run()
                feed = daemon.pipelines["felix"].feed
                while len(feed.broadcast) < members:  # noqa: ASYNC110 (the last round)
                    await trio.sleep(0.05)
                await trio.sleep(0.5)
                await proc.stdin.aclose()
                done = await read_json_line(proc.stdout, buf)
    assert proc.returncode == 0
    assert in_sync["errors"] == [] and done["errors"] == []
    assert churn.writes > 0 and len(done["delays"]) == members * churn.writes
