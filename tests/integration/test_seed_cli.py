"""`trio-typha serve --seed` then `trio-typha client --once --json`, as real processes.

The client's keys and values must be exactly what the pure model layer says the seed file
converts to, for every syncer type and both protocols.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.internal_errors import internal_errors
from trio_typha.datastore.base import ResourceEvent
from trio_typha.datastore.seed import load_seed_file
from trio_typha.model.kinds import kind_for
from trio_typha.model.kv import SYNCER_TYPES
from trio_typha.model.syncers import DatastoreMode, syncer_definition
from trio_typha.model.validation import ValidationFilter
from trio_typha.syncer.tracker import SourceTracker

SEED = Path(__file__).parents[2] / "testbed" / "seeds" / "all-kinds.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def complete_seed(path: Path) -> Path:
    """The seed with the uid and creationTimestamp an API server (and the memory store)
    would give each object that lacks them, fixed so both sides agree on them."""
    import uuid

    import yaml
    objs = load_seed_file(str(SEED))
    for obj in objs:
        md = obj["metadata"]
        md.setdefault("uid", str(uuid.uuid5(uuid.NAMESPACE_URL,
                                            f"{obj['kind']}/{md.get('namespace')}/{md['name']}")))
        md.setdefault("creationTimestamp", "2025-01-02T03:04:05Z")
    path.write_text(yaml.safe_dump_all(objs))
    return path


def expected_kvs(syncer: str, seed: Path) -> dict[str, str]:
    definition = syncer_definition(syncer, DatastoreMode.KDD)
    tracker = SourceTracker(definition)
    updates = tracker.static_updates()
    for i, obj in enumerate(load_seed_file(str(seed))):
        md = obj["metadata"]
        kind = kind_for(obj["apiVersion"], obj["kind"])
        if kind not in definition.kinds:
            continue
        obj = {**obj, "metadata": {**md, "resourceVersion": str(i + 1)}}
        updates += tracker.apply(ResourceEvent(kind, md.get("namespace", "default")
                                               if kind.namespaced else "", md["name"], obj,
                                               str(i + 1)))
    kvs: dict[str, str] = {}
    for u in ValidationFilter()(updates):
        if u.value:
            kvs[u.key] = u.value.decode()
        else:
            kvs.pop(u.key, None)
    return kvs


@pytest.fixture(scope="module")
def seed(tmp_path_factory) -> Path:
    return complete_seed(tmp_path_factory.mktemp("seed") / "all-kinds.yaml")


@pytest.fixture(scope="module")
def server(seed, tmp_path_factory):
    port, health = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("TYPHA_")}
    env["TYPHA_SERVERWORKERS"] = "1"  # one process (tests/conftest.py)
    log_path = tmp_path_factory.mktemp("seed-server") / "stderr"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "trio_typha", "serve", "--seed", str(seed), "--host",
             "127.0.0.1", "--port", str(port), "--health", "--health-host", "127.0.0.1",
             "--health-port", str(health), "--log-level", "WARNING"], env=env, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{health}/readiness",
                                            timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # No client connection crashed its handler (the bulkheads would have hidden it).
    assert internal_errors(log_path.read_text()) == []


@pytest.mark.parametrize("protocol", ["typha", "grpc"])
@pytest.mark.parametrize("syncer", SYNCER_TYPES)
def test_client_json_shows_the_converted_seed(server, seed, syncer, protocol) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "trio_typha", "client", "--addr", f"127.0.0.1:{server}",
         "--syncer", syncer, "--protocol", protocol, "--once", "--json"],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    summary = lines[-1]["summary"]
    got = {kv["key"]: kv["value"] for kv in lines[:-1]}
    expected = expected_kvs(syncer, seed)
    assert got == expected
    assert summary["keys"] == len(expected) and summary["status"] == "in-sync"


def test_seed_covers_every_kind_for_felix(seed) -> None:
    keys = expected_kvs("felix", seed)
    for prefix in ("/calico/v1/policy/KubernetesNetworkPolicy/",
                   "/calico/v1/policy/NetworkPolicy/", "/calico/v1/policy/GlobalNetworkPolicy//",
                   "/calico/v1/policy/StagedNetworkPolicy/", "/calico/v1/policy/tier/",
                   "/calico/v1/policy/profile/kns.", "/calico/v1/policy/profile/ksa.",
                   "/calico/v1/policy/profile/projectcalico-default-allow/",
                   "/calico/v1/netset/", "/calico/v1/ipam/v4/pool/", "/calico/v1/config/",
                   "/calico/v1/Ready", "/calico/resources/v3/projectcalico.org/nodes/",
                   "/calico/resources/v3/projectcalico.org/bgppeers/",
                   "/calico/resources/v3/projectcalico.org/bgpconfigurations/"):
        assert any(k.startswith(prefix) for k in keys), prefix
    assert any("/workload/k8s/" in k for k in keys)
    assert any(k.endswith("/bird_ip") for k in keys)
