"""The sans-IO cores are pure by construction: marked, and checked from their source.

A module declares itself sans-IO with a module-level ``__sans_io__ = True``
(docs/architecture.md, "Pure cores, trio shells").  The probe finds the marked modules by
that marker, not by a list, and reads each one's syntax tree: wherever it stands (module
level or inside a function), a marked module may not import an event loop, sockets, TLS, an
HTTP client, processes, files, the environment or a clock; may not call ``open``/``print``;
may not read ``.now()``/``.today()``, ``environ``/``getenv``, ``Path.read_*`` or the
standard streams; and may import from trio_typha only modules that are marked too, so
the rule holds transitively.  Then every marked module is imported in a fresh interpreter,
so a third-party import that pulls trio or httpx in is caught as well.

No module of trio_typha, marked or not, keeps process-wide state: none rebinds its globals
or changes a container it binds at module level from a function (a memo, a registry), as
such state belongs to an object its owner (the daemon, a pipeline) holds and passes in.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from tests.source_scan import PACKAGE_ROOT, Imported, Source, sources

MARKER = "__sans_io__"

#: Modules (and their submodules) a sans-IO module may not import, and what they reach.
FORBIDDEN_MODULES = {
    "trio": "an event loop", "trio_websocket": "an event loop", "asyncio": "an event loop",
    "anyio": "an event loop", "socket": "sockets", "select": "sockets",
    "selectors": "sockets", "ssl": "TLS", "httpx": "an HTTP client",
    "httpcore": "an HTTP client", "http.client": "an HTTP client",
    "urllib.request": "an HTTP client", "kubernetes": "the Kubernetes client",
    "subprocess": "processes", "multiprocessing": "processes", "signal": "processes",
    "os": "files, the environment and processes", "pathlib": "files", "io": "files",
    "shutil": "files", "tempfile": "files", "glob": "files", "fcntl": "files",
    "mmap": "files", "resource": "process limits", "ctypes": "raw memory",
    "time": "clocks", "gc": "the process's collector",
}
#: Pure conversions that live in a forbidden module, importable by name only.
ALLOWED_FROM = {"socket": frozenset({"inet_aton", "inet_ntoa", "inet_pton", "inet_ntop",
                                    "gaierror"})}
#: Attributes that read a clock, the environment, a file or a standard stream, whatever
#: object they are reached through.
FORBIDDEN_ATTRIBUTES = {
    "now": "a clock", "utcnow": "a clock", "today": "a clock", "environ": "the environment",
    "getenv": "the environment", "read_text": "a file", "read_bytes": "a file",
    "write_text": "a file", "write_bytes": "a file", "stdin": "a standard stream",
    "stdout": "a standard stream", "stderr": "a standard stream", "argv": "the command line",
}
#: Methods that change the container they are called on.
MUTATORS = frozenset({"append", "appendleft", "add", "clear", "discard", "extend", "insert",
                      "pop", "popitem", "popleft", "remove", "setdefault", "update"})
#: Builtins that do I/O.
FORBIDDEN_CALLS = {"open": "a file", "print": "a standard stream",
                   "input": "a standard stream", "breakpoint": "a debugger"}

#: Packages pure as a whole: every module in them is marked.
PURE_PACKAGES = ("trio_typha.model",)
#: Generated modules, which cannot carry the marker (their generator's output is checked
#: byte for byte): held to the same rules as the marked ones.
GENERATED = {"trio_typha.protocols.grpc.typha_pb2": "protoc's messages (tools/gen_proto.py)",
             "trio_typha.datastore.etcd_pb2": "protoc's messages (tools/gen_proto.py)",
             "trio_typha.model.goschema": "Calico's Go types (tools/gen_goschema.py)"}


def _forbidden_import(imp: Imported) -> str | None:
    for module, reaches in FORBIDDEN_MODULES.items():
        if imp.module == module or imp.module.startswith(module + "."):
            if imp.name is not None and imp.name in ALLOWED_FROM.get(module, ()):
                return None
            return reaches
    # ``from http import client`` and the like name the submodule as ``name``.
    if imp.name is not None and f"{imp.module}.{imp.name}" in FORBIDDEN_MODULES:
        return FORBIDDEN_MODULES[f"{imp.module}.{imp.name}"]
    return None


def violations(source: Source, marked: set[str], modules: set[str]) -> list[str]:
    """Why ``source`` is not sans-IO (empty: it is); ``marked`` names the marked modules
    among ``modules``, every module of trio_typha."""
    found = []
    for imp in source.imports():
        reaches = _forbidden_import(imp)
        what = imp.module + (f".{imp.name}" if imp.name else "")
        if reaches:
            found.append(f"{source.rel}:{imp.line}: imports {what} ({reaches})")
        elif imp.top == "trio_typha":
            target = what if what in modules else imp.module
            if target not in marked:
                found.append(f"{source.rel}:{imp.line}: imports {target}, which is not "
                             f"marked {MARKER}")
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES:
            found.append(f"{source.rel}:{node.lineno}: reads .{node.attr} "
                         f"({FORBIDDEN_ATTRIBUTES[node.attr]})")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in FORBIDDEN_CALLS:
            found.append(f"{source.rel}:{node.lineno}: calls {node.func.id}() "
                         f"({FORBIDDEN_CALLS[node.func.id]})")
    return found + state_violations(source)


def _module_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _changed_container(node: ast.AST) -> ast.Name | None:
    """The bare name whose container ``node`` changes (``x[k] = v``, ``del x[k]``,
    ``x.append(v)``), if it does."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr in MUTATORS and isinstance(node.func.value, ast.Name):
        return node.func.value
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)) \
            and isinstance(node.value, ast.Name):
        return node.value
    return None


def state_violations(source: Source) -> list[str]:
    """Where ``source`` keeps process-wide state: a ``global`` statement, or a function
    changing a container bound at module level (a name it binds itself is its own)."""
    found = []
    module = _module_names(source.tree)
    for fn in ast.walk(source.tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        local = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)} | {
            n.id for n in ast.walk(fn) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Store)}
        for node in ast.walk(fn):
            if isinstance(node, ast.Global):
                found.append(f"{source.rel}:{node.lineno}: rebinds module globals "
                             f"{', '.join(node.names)} (process-wide state)")
            elif (name := _changed_container(node)) is not None \
                    and name.id in module and name.id not in local:
                found.append(f"{source.rel}:{node.lineno}: changes module-level "
                             f"{name.id} (process-wide state)")
    return sorted(set(found))


def _marked() -> list[Source]:
    return [s for s in sources() if s.module_level(MARKER) is True or s.name in GENERATED]


def test_marked_modules_are_sans_io() -> None:
    marked = _marked()
    names = {s.name for s in marked}
    modules = {s.name for s in sources()}
    assert len(marked) > 80  # the marker is found (no list to keep)
    assert [v for s in marked for v in violations(s, names, modules)] == []


def test_every_module_of_a_pure_package_is_marked() -> None:
    unmarked = [s.rel for s in sources() if s.name.startswith(PURE_PACKAGES)
                and s.path.name != "__init__.py" and s.name not in GENERATED
                and s.module_level(MARKER) is not True]
    assert unmarked == []


MODULES = {"trio_typha.cache.core", "trio_typha.cache.feed", "trio_typha.sessions.connections"}


def _synthetic(text: str) -> Source:
    return Source("trio_typha.cache.example", PACKAGE_ROOT / "cache" / "example.py",
                  ast.parse(text))


def test_the_probe_rejects_each_kind_of_impurity() -> None:
    cases = {
        "def f():\n    import trio\n    return trio.current_time()\n": "imports trio",
        "def f():\n    from time import monotonic\n    return monotonic()\n": "imports time",
        "import datetime\nx = datetime.datetime.now()\n": "reads .now",
        "def f(p):\n    return open(p).read()\n": "calls open()",
        "def f(p):\n    return p.read_text()\n": "reads .read_text",
        "from os import environ\n": "imports os.environ",
        "import socket\n": "imports socket",
        "from http import client\n": "imports http.client",
        "_n = 0\ndef f():\n    global _n\n    _n += 1\n": "rebinds module globals _n",
        "_memo = {}\ndef f(k):\n    _memo[k] = 1\n": "changes module-level _memo",
        "_seen = []\nasync def f(k):\n    _seen.append(k)\n": "changes module-level _seen",
        "_m: dict = {}\ndef f():\n    del _m['k']\n": "changes module-level _m",
        "from ..sessions import connections\n": "imports trio_typha.sessions.connections, "
                                                "which is not marked",
        "from .feed import CacheFeed\n": "imports trio_typha.cache.feed, which is not marked",
    }
    for text, expected in cases.items():
        found = violations(_synthetic(text), {"trio_typha.cache.core"}, MODULES)
        assert any(expected in v for v in found), (text, found)


def test_the_probe_accepts_pure_code() -> None:
    text = ("from socket import inet_aton\nimport json\nfrom .core import Breadcrumb\n"
            "def f(now: float, s: str) -> bytes:\n    return inet_aton(s)\n"
            "TABLE = {1: 2}\nTABLE[3] = 4\n"  # built at import, read only after
            "def g(TABLE: dict) -> None:\n    TABLE.clear()\n"  # its own argument
            "def h() -> list:\n    TABLE = []\n    TABLE.append(1)\n    return TABLE\n")
    assert violations(_synthetic(text), {"trio_typha.cache.core"}, MODULES) == []


def test_no_module_keeps_process_wide_state() -> None:
    assert [v for s in sources() for v in state_violations(s)] == []


_PROBE = """
import importlib, json, sys
found = {}
for name in json.loads(sys.argv[1]):
    before = set(sys.modules)
    importlib.import_module(name)
    new = set(sys.modules) - before
    bad = sorted(m for m in new if m.split(".")[0] in json.loads(sys.argv[2]))
    if bad:
        found[name] = bad
print(json.dumps(found))
"""

#: Found in ``sys.modules`` after importing a marked module, these mean something it
#: imports (a third-party package, say) brought an event loop or an HTTP client along.
LOADED_NEVER = ("trio", "trio_websocket", "anyio", "httpx", "httpcore")


def _probe(modules: list[str]) -> dict[str, list[str]]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(modules), json.dumps(LOADED_NEVER)],
        capture_output=True, text=True, check=True, cwd=Path(PACKAGE_ROOT).parent)
    found: dict[str, list[str]] = json.loads(out.stdout)
    return found


def test_importing_the_marked_modules_loads_no_event_loop_or_http_client() -> None:
    assert _probe([s.name for s in _marked()]) == {}


def test_datastore_does_not_import_client() -> None:
    offenders = [f"{s.rel}:{imp.line}" for s in sources() if s.name.startswith(
        "trio_typha.datastore") for imp in s.imports() if imp.module.startswith(
        "trio_typha.client")]
    assert offenders == []


def test_the_import_probe_sees_trio_when_a_module_imports_it() -> None:
    found = _probe(["trio_typha.protocols.gob.shell"])
    assert "trio" in found["trio_typha.protocols.gob.shell"]
