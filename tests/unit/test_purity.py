"""The sans-IO cores really are pure: importing them never imports trio.

Each check runs in a fresh interpreter, so nothing another test imported can hide or fake a
dependency.  The modules are imported one after the other and ``sys.modules`` is looked at
after each, so a failure names the first module that pulled trio in and what it pulled.
"""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import trio_typha
import trio_typha.model

ROOT = Path(trio_typha.__file__).resolve().parent

#: The pure cores (docs/architecture.md lists the same set).  Everything in model/ is added.
PURE = [
    "trio_typha.backoff",
    "trio_typha.config",
    "trio_typha.cache.core",
    "trio_typha.cache.fanout",
    "trio_typha.datastore.events",
    "trio_typha.datastore.etcd_gateway",
    "trio_typha.datastore.etcd_layout",
    "trio_typha.datastore.etcd_state",
    "trio_typha.datastore.k8s_listbody",
    "trio_typha.datastore.k8s_reflector",
    "trio_typha.datastore.k8s_stream",
    "trio_typha.datastore.known",
    "trio_typha.datastore.stall",
    "trio_typha.observe.connections",
    "trio_typha.observe.throttle",
    "trio_typha.protocols.gob.codec",
    "trio_typha.protocols.gob.codec_decode",
    "trio_typha.protocols.gob.codec_encode",
    "trio_typha.protocols.gob.codec_types",
    "trio_typha.protocols.gob.gotime",
    "trio_typha.protocols.gob.snappy",
    "trio_typha.protocols.gob.messages",
    "trio_typha.protocols.gob.encode_once",
    "trio_typha.protocols.gob.session",
    "trio_typha.protocols.gob.client_session",
    "trio_typha.protocols.grpc.abuse",
    "trio_typha.protocols.grpc.client_session",
    "trio_typha.protocols.grpc.framing",
    "trio_typha.protocols.grpc.metadata",
    "trio_typha.protocols.grpc.status",
    "trio_typha.protocols.grpc.h2conn",
    "trio_typha.protocols.grpc.session",
    "trio_typha.protocols.grpc.encode_once",
    "trio_typha.sessions.lag",
    "trio_typha.sessions.liveness",
    "trio_typha.sessions.settings",
    "trio_typha.server.sniff",
    "trio_typha.cpus",
    "trio_typha.upstream.wire",
    "trio_typha.workers.control",
    "trio_typha.syncer.gcpause",
    "trio_typha.syncer.tracker",
]

_PROBE = """
import importlib, json, sys
found = {}
for name in json.loads(sys.argv[1]):
    before = set(sys.modules)
    importlib.import_module(name)
    new = set(sys.modules) - before
    bad = sorted(m for m in new if m == "trio" or m.startswith(("trio.", "trio_websocket"))
                 or m.startswith(tuple(json.loads(sys.argv[2]))))
    if bad:
        found[name] = bad
print(json.dumps(found))
"""


def _probe(modules: list[str], forbidden: tuple[str, ...] = ()) -> dict[str, list[str]]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(modules), json.dumps(list(forbidden))],
        capture_output=True, text=True, check=True, cwd=ROOT.parent)
    return json.loads(out.stdout)


def _model_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(trio_typha.model.__path__,
                                                         "trio_typha.model."))


def test_pure_cores_and_the_whole_model_import_no_trio() -> None:
    modules = PURE + _model_modules()
    assert len(modules) > 50
    assert _probe(modules) == {}


def test_the_probe_sees_trio_when_a_module_imports_it() -> None:
    # The same probe on a trio shell: proves the test above could fail.
    found = _probe(["trio_typha.protocols.gob.shell"])
    assert "trio" in found["trio_typha.protocols.gob.shell"]


def test_datastore_does_not_import_client() -> None:
    datastore = sorted(m.name for m in pkgutil.walk_packages(
        [str(ROOT / "datastore")], "trio_typha.datastore."))
    assert _probe_forbidden(datastore, ("trio_typha.client",)) == {}


def _probe_forbidden(modules: list[str], prefixes: tuple[str, ...]) -> dict[str, list[str]]:
    found = _probe(modules, prefixes)
    return {name: [m for m in mods if m.startswith(prefixes)] for name, mods in found.items()
            if any(m.startswith(prefixes) for m in mods)}


def test_the_model_never_reads_the_environment() -> None:
    """Settings reach the model as arguments (e.g. FELIX_INTERFACEPREFIX from the daemon)."""
    offenders = []
    for path in sorted((ROOT / "model").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv"):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []
