"""Regenerate trio_typha/model/goschema.py from the Go type definitions of a Calico checkout.

    git clone --no-checkout <calico repository> /tmp/calico && git -C /tmp/calico checkout v3.32.1
    .venv/bin/python tools/gen_goschema.py --calico /tmp/calico           # rewrite goschema.py
    .venv/bin/python tools/gen_goschema.py --calico /tmp/calico --check   # exit 1 if it differs

The checkout is read, never copied: the tool parses the Go source of the packages the tables
cover (``api/pkg/apis/projectcalico/v3``, ``libcalico-go/lib/apis/internalapi``,
``libcalico-go/lib/backend/model`` and what they import) and of the Kubernetes API modules at
the versions Calico's ``go.mod`` pins (found in the Go module cache, ``go mod download``
fetches them; ``--k8s-api`` / ``--apimachinery`` name other copies).  It writes the module and
records the sha256 of what it wrote, with the Calico version and commit it read, in
``goschema.generated.json`` beside it, which ``tests/unit/model/test_generated.py`` checks.

Only the Python standard library is used: a small Go lexer and a parser for type
declarations, enough for struct layouts, tags and ``MarshalJSON`` methods.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generated import git_source, record, stale  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "trio_typha" / "model" / "goschema.py"
MANIFEST = OUT.with_name("goschema.generated.json")

CALICO_MODULE = "github.com/projectcalico/calico"
API_MODULE = "github.com/projectcalico/api"
K8S_API = "k8s.io/api"
APIMACHINERY = "k8s.io/apimachinery"

# Short names of the packages whose structs the tables hold, as goschema's keys spell them.
PREFIXES = {
    f"{API_MODULE}/pkg/apis/projectcalico/v3": "v3",
    f"{API_MODULE}/pkg/lib/numorstring": "numorstring",
    f"{CALICO_MODULE}/libcalico-go/lib/apis/internalapi": "internal",
    f"{CALICO_MODULE}/libcalico-go/lib/backend/model": "v1",
    f"{K8S_API}/core/v1": "core",
    f"{K8S_API}/discovery/v1": "discovery",
    f"{K8S_API}/networking/v1": "networking",
    f"{APIMACHINERY}/pkg/apis/meta/v1": "meta",
}

# Types with their own MarshalJSON, and the gotypes encoder that writes what it writes.
# A type with a MarshalJSON that is not here stops the generator: it needs an encoder first.
CUSTOM = {
    (f"{APIMACHINERY}/pkg/apis/meta/v1", "Time"): "TIME",
    (f"{APIMACHINERY}/pkg/apis/meta/v1", "Duration"): "DURATION",
    (f"{APIMACHINERY}/pkg/apis/meta/v1", "FieldsV1"): "FIELDS_V1",
    (f"{APIMACHINERY}/pkg/util/intstr", "IntOrString"): "INT_OR_STRING",
    (f"{API_MODULE}/pkg/lib/numorstring", "Port"): "PORT",
    (f"{API_MODULE}/pkg/lib/numorstring", "Protocol"): "PROTOCOL",
    (f"{API_MODULE}/pkg/lib/numorstring", "DSCP"): "DSCP",
    (f"{CALICO_MODULE}/libcalico-go/lib/net", "IP"): "IP",
    (f"{CALICO_MODULE}/libcalico-go/lib/net", "IPNet"): "IPNET",
    (f"{CALICO_MODULE}/libcalico-go/lib/net", "MAC"): "MAC",
    (f"{CALICO_MODULE}/lib/std/uniquelabels", "Map"): "LABELS",
}

# The value each resource kind (and each v1 model value) is serialized from.
ROOTS = {
    "BGPConfiguration": "v3.BGPConfiguration",
    "BGPFilter": "v3.BGPFilter",
    "BGPPeer": "v3.BGPPeer",
    "BlockAffinity": "v3.BlockAffinity",
    "BlockAffinityInternal": "internal.BlockAffinity",
    "CalicoNodeStatus": "v3.CalicoNodeStatus",
    "ClusterInformation": "v3.ClusterInformation",
    "EndpointSlice": "discovery.EndpointSlice",
    "FelixConfiguration": "v3.FelixConfiguration",
    "GlobalNetworkPolicy": "v3.GlobalNetworkPolicy",
    "GlobalNetworkSet": "v3.GlobalNetworkSet",
    "HostEndpoint": "v3.HostEndpoint",
    "IPAMBlock": "v3.IPAMBlock",
    "IPAMBlockInternal": "internal.IPAMBlock",
    "IPPool": "v3.IPPool",
    "IPReservation": "v3.IPReservation",
    "KubeControllersConfiguration": "v3.KubeControllersConfiguration",
    "LiveMigration": "internal.LiveMigration",
    "NetworkPolicy": "v3.NetworkPolicy",
    "NetworkSet": "v3.NetworkSet",
    "Node": "internal.Node",
    "Profile": "v3.Profile",
    "Service": "core.Service",
    "StagedGlobalNetworkPolicy": "v3.StagedGlobalNetworkPolicy",
    "StagedKubernetesNetworkPolicy": "v3.StagedKubernetesNetworkPolicy",
    "StagedNetworkPolicy": "v3.StagedNetworkPolicy",
    "Tier": "v3.Tier",
    "WorkloadEndpoint": "internal.WorkloadEndpoint",
    "v1.AllocationBlock": "v1.AllocationBlock",
    "v1.BlockAffinity": "v1.BlockAffinity",
    "v1.HostEndpoint": "v1.HostEndpoint",
    "v1.IPPool": "v1.IPPool",
    "v1.NetworkSet": "v1.NetworkSet",
    "v1.Policy": "v1.Policy",
    "v1.ProfileRules": "v1.ProfileRules",
    "v1.Tier": "v1.Tier",
    "v1.Wireguard": "v1.Wireguard",
    "v1.WorkloadEndpoint": "v1.WorkloadEndpoint",
}

# Specs whose fields Calico's configuration update processor turns into v1 config keys.
CONFIG_TABLES = (("FELIX_CONFIG_FIELDS", "v3.FelixConfigurationSpec"),
                 ("CLUSTER_INFO_FIELDS", "v3.ClusterInformationSpec"))

_SIGNED = {"int", "int8", "int16", "int32", "int64", "rune"}
_UNSIGNED = {"uint", "uint8", "uint16", "uint32", "uint64", "uintptr", "byte"}
_FLOAT = {"float32", "float64"}


class GoSourceError(Exception):
    """The Go source does not have the shape the generator understands."""


# --- lexer -----------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r]+)
  | (?P<nl>\n)
  | (?P<lcomment>//[^\n]*)
  | (?P<bcomment>/\*.*?\*/)
  | (?P<raw>`[^`]*`)
  | (?P<str>"(?:[^"\\\n]|\\.)*")
  | (?P<rune>'(?:[^'\\\n]|\\.)*')
  | (?P<num>\.?[0-9][0-9a-zA-Z_.]*(?:[eEpP][+-][0-9_]+)?)
  | (?P<ident>[A-Za-z_\u0080-\uffff][A-Za-z0-9_\u0080-\uffff]*)
  | (?P<op>\.\.\.|<<=|>>=|&\^=|&&|\|\||<-|\+\+|--|==|!=|<=|>=|:=|<<|>>|&\^|[-+*/%&|^]=
          |[-+*/%&|^<>=!~(){}\[\],;.:])
""", re.VERBOSE | re.DOTALL)

_ENDS_STATEMENT = {"ident", "num", "str", "raw", "rune"}
_ENDS_KEYWORDS = {"break", "continue", "fallthrough", "return"}
_ENDS_OPS = {")", "]", "}", "++", "--"}


@dataclasses.dataclass(frozen=True)
class Tok:
    kind: str  # ident, num, str, raw, rune, op
    text: str


def tokenize(src: str, where: str) -> list[Tok]:
    """Go tokens of ``src`` with the semicolons the language inserts at line ends."""
    out: list[Tok] = []
    pos = 0

    def newline() -> None:
        if out and (out[-1].kind in _ENDS_STATEMENT and out[-1].text not in _KEYWORD_NO_SEMI
                    or out[-1].text in _ENDS_KEYWORDS
                    or out[-1].kind == "op" and out[-1].text in _ENDS_OPS):
            out.append(Tok("op", ";"))

    while pos < len(src):
        m = _TOKEN.match(src, pos)
        if m is None:
            line = src.count("\n", 0, pos) + 1
            raise GoSourceError(f"{where}:{line}: cannot tokenize {src[pos:pos + 20]!r}")
        pos = m.end()
        kind = m.lastgroup
        text = m.group()
        if kind == "ws" or kind == "lcomment":
            continue
        if kind == "nl" or kind == "bcomment" and "\n" in text:
            newline()
            continue
        if kind == "bcomment":
            continue
        assert kind is not None
        out.append(Tok(kind, text))
    newline()
    return out


# Keywords are lexed as identifiers; these never end a statement.
_KEYWORD_NO_SEMI = {"package", "import", "type", "func", "var", "const", "struct", "interface",
                    "map", "chan", "go", "defer", "if", "else", "for", "switch", "case",
                    "default", "select", "range", "goto"}


# --- type expressions ------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Named:
    pkg: str  # import path ("" for a predeclared type)
    name: str


@dataclasses.dataclass(frozen=True)
class Pointer:
    elem: GoType


@dataclasses.dataclass(frozen=True)
class SliceOf:
    elem: GoType


@dataclasses.dataclass(frozen=True)
class ArrayOf:
    elem: GoType


@dataclasses.dataclass(frozen=True)
class MapOf:
    key: GoType
    elem: GoType


@dataclasses.dataclass(frozen=True)
class StructField:
    name: str  # "" when embedded
    type: GoType
    tag: str


@dataclasses.dataclass(frozen=True)
class StructOf:
    fields: tuple[StructField, ...]


@dataclasses.dataclass(frozen=True)
class Opaque:
    """An interface, function, channel or generic type: never serialized by the tables."""
    what: str


GoType = Named | Pointer | SliceOf | ArrayOf | MapOf | StructOf | Opaque


def tag_get(tag: str, key: str) -> str | None:
    """``reflect.StructTag.Get``: the value of ``key:"value"`` in a struct tag, or None."""
    for m in re.finditer(r'([^\s:"]+):"((?:[^"\\]|\\.)*)"', tag):
        if m.group(1) == key:
            return m.group(2)
    return None


class _Parser:
    """Type declarations, imports and MarshalJSON methods of one Go file."""

    def __init__(self, toks: list[Tok], where: str, resolve_import: dict[str, str]) -> None:
        self.toks = toks
        self.i = 0
        self.where = where
        self.imports = resolve_import  # package name in this file -> import path
        self.pkg_path = ""

    def peek(self, k: int = 0) -> Tok:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else Tok("eof", "")

    def next(self) -> Tok:
        t = self.peek()
        self.i += 1
        return t

    def expect(self, text: str) -> None:
        t = self.next()
        if t.text != text:
            raise GoSourceError(f"{self.where}: expected {text!r}, found {t.text!r}")

    def skip_balanced(self) -> None:
        """Skip to the end of the current top-level declaration."""
        depth = 0
        while self.peek().kind != "eof":
            t = self.next()
            if t.text in "([{" and t.kind == "op":
                depth += 1
            elif t.text in ")]}" and t.kind == "op":
                depth -= 1
            elif t.text == ";" and depth == 0:
                return

    def type_expr(self) -> GoType:
        t = self.next()
        if t.text == "*":
            return Pointer(self.type_expr())
        if t.text == "(":
            inner = self.type_expr()
            self.expect(")")
            return inner
        if t.text == "[":
            if self.peek().text == "]":
                self.next()
                return SliceOf(self.type_expr())
            depth = 1
            while depth:
                u = self.next()
                depth += {"[": 1, "]": -1}.get(u.text, 0)
            return ArrayOf(self.type_expr())
        if t.text == "map":
            self.expect("[")
            key = self.type_expr()
            self.expect("]")
            return MapOf(key, self.type_expr())
        if t.text == "struct":
            return self.struct_body()
        if t.text in ("interface", "func", "chan"):
            self.i -= 1
            self.skip_type()
            return Opaque(t.text)
        if t.kind != "ident":
            raise GoSourceError(f"{self.where}: unexpected {t.text!r} in a type")
        named = self.qualified(t.text)
        if self.peek().text == "[":  # a generic instantiation
            self.skip_group()
            return Opaque(f"{named.name}[...]")
        return named

    def qualified(self, first: str) -> Named:
        if self.peek().text == ".":
            self.next()
            name = self.next().text
            path = self.imports.get(first)
            if path is None:
                raise GoSourceError(f"{self.where}: no import for {first}.{name}")
            return Named(path, name)
        if first in _SIGNED | _UNSIGNED | _FLOAT | {"string", "bool", "any", "error",
                                                   "complex64", "complex128"}:
            return Named("", first)
        return Named(self.pkg_path, first)

    def skip_group(self) -> None:
        opener = self.next().text
        closer = {"(": ")", "[": "]", "{": "}"}[opener]
        depth = 1
        while depth:
            u = self.next()
            if u.kind == "eof":
                raise GoSourceError(f"{self.where}: unbalanced {opener}")
            if u.text == opener:
                depth += 1
            elif u.text == closer:
                depth -= 1

    def skip_type(self) -> None:
        """Skip an interface, func or chan type."""
        t = self.next()
        if t.text == "interface":
            self.skip_group()
        elif t.text == "chan":
            if self.peek().text == "<-":
                self.next()
            self.type_expr()
        else:  # func(params) results
            self.skip_group()
            if self.peek().text == "(":
                self.skip_group()
            elif self.peek().text not in (";", ")", ",", "]", "}", "") \
                    and self.peek().kind != "str" and self.peek().kind != "raw":
                self.type_expr()

    def struct_body(self) -> StructOf:
        self.expect("{")
        fields: list[StructField] = []
        while self.peek().text != "}":
            if self.peek().text == ";":
                self.next()
                continue
            names: list[str] = []
            if self.peek().text == "*" or self.peek(1).text in (".", ";", "}") \
                    or self.peek(1).kind in ("str", "raw"):
                ftype = self.type_expr()  # embedded
            else:
                names.append(self.next().text)
                while self.peek().text == ",":
                    self.next()
                    names.append(self.next().text)
                ftype = self.type_expr()
            tag = ""
            if self.peek().kind in ("str", "raw"):
                raw = self.next().text
                tag = raw[1:-1] if raw.startswith("`") else json.loads(raw)
            for name in names or [""]:
                fields.append(StructField(name, ftype, tag))
        self.expect("}")
        return StructOf(tuple(fields))


@dataclasses.dataclass
class Package:
    path: str
    name: str
    types: dict[str, GoType]
    marshalers: set[str]


def _import_name(path: str) -> str:
    last = path.rsplit("/", 1)[-1]
    return re.sub(r"^go-|\.v[0-9]+$|-go$", "", last).replace("-", "_").replace(".", "_")


def parse_package(path: str, directory: Path) -> Package:
    """The type declarations and MarshalJSON receivers of the Go package in ``directory``."""
    files = sorted(p for p in directory.glob("*.go") if not p.name.endswith("_test.go"))
    if not files:
        raise GoSourceError(f"no Go files for {path} in {directory}")
    pkg = Package(path, "", {}, set())
    for file in files:
        toks = tokenize(file.read_text("utf-8"), str(file))
        p = _Parser(toks, str(file), {})
        p.pkg_path = path
        p.expect("package")
        pkg.name = p.next().text
        p.expect(";")
        while p.peek().kind != "eof":
            t = p.next()
            if t.text == ";":
                continue
            if t.text == "import":
                specs = []
                if p.peek().text == "(":
                    p.next()
                    while p.peek().text != ")":
                        if p.peek().text == ";":
                            p.next()
                            continue
                        alias = p.next() if p.peek().kind != "str" else None
                        specs.append((alias.text if alias else None, json.loads(p.next().text)))
                    p.next()
                else:
                    alias = p.next() if p.peek().kind != "str" else None
                    specs.append((alias.text if alias else None, json.loads(p.next().text)))
                for alias, imp in specs:
                    if alias not in ("_", "."):
                        p.imports[alias or _import_name(imp)] = imp
            elif t.text == "type":
                if p.peek().text == "(":
                    p.next()
                    while p.peek().text != ")":
                        if p.peek().text == ";":
                            p.next()
                            continue
                        _type_spec(p, pkg)
                    p.next()
                else:
                    _type_spec(p, pkg)
            elif t.text == "func" and p.peek().text == "(":
                start = p.i
                p.skip_group()
                recv = [u.text for u in p.toks[start:p.i] if u.kind == "ident"]
                if p.peek().text == "MarshalJSON" and recv:
                    pkg.marshalers.add(recv[-1] if len(recv) == 1 else recv[1])
                p.skip_balanced()
            else:
                p.skip_balanced()
    return pkg


def _type_spec(p: _Parser, pkg: Package) -> None:
    name = p.next().text
    if p.peek().text == "[" and p.peek(1).kind == "ident" and p.peek(2).text != "]":
        p.skip_group()  # type parameters: a generic type, never one the tables hold
        p.type_expr()
        pkg.types.setdefault(name, Opaque("generic"))
        return
    if p.peek().text == "=":
        p.next()
    pkg.types.setdefault(name, p.type_expr())


# --- the schema ------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Layout:
    fields: tuple[tuple[str, str, bool], ...]  # json name, type expression, omitempty
    validate: tuple[tuple[str, str], ...]  # json name, validate tag
    go_fields: tuple[tuple[str, StructField], ...]  # json name, declaration


class Schema:
    """The layouts of every struct reachable from :data:`ROOTS`, read from Go source."""

    def __init__(self, dirs: dict[str, Path]) -> None:
        self.dirs = dirs  # module path -> directory
        self.packages: dict[str, Package] = {}
        self.layouts: dict[str, Layout] = {}
        self.validate: dict[str, tuple[tuple[str, str], ...]] = {}

    def package(self, path: str) -> Package:
        pkg = self.packages.get(path)
        if pkg is None:
            for module, directory in sorted(self.dirs.items(), key=lambda kv: -len(kv[0])):
                if path == module or path.startswith(module + "/"):
                    sub = path[len(module):].lstrip("/")
                    pkg = parse_package(path, directory / sub if sub else directory)
                    break
            else:
                raise GoSourceError(f"package {path} is outside the checkouts read")
            self.packages[path] = pkg
        return pkg

    def key(self, named: Named) -> str:
        prefix = PREFIXES.get(named.pkg)
        if prefix is None:
            raise GoSourceError(f"struct {named.pkg}.{named.name} is in no known package; "
                                "add the package to PREFIXES")
        return f"{prefix}.{named.name}"

    def lookup(self, named: Named) -> GoType:
        pkg = self.package(named.pkg)
        t = pkg.types.get(named.name)
        if t is None:
            raise GoSourceError(f"no type {named.name} in {named.pkg}")
        return t

    def expr(self, t: GoType) -> str:
        """The goschema expression of the Go type ``t``."""
        if isinstance(t, Pointer):
            return f"P({self.expr(t.elem)})"
        if isinstance(t, SliceOf):
            return f"L({self.expr(t.elem)})"
        if isinstance(t, MapOf):
            if self.expr(t.key) != "S":
                raise GoSourceError(f"map key {t.key} is not a string")
            return f"M({self.expr(t.elem)})"
        if not isinstance(t, Named):
            raise GoSourceError(f"{t} cannot be tabled")
        if t.pkg == "":
            basic = t.name
            if basic == "string":
                return "S"
            if basic == "bool":
                return "B"
            if basic in _SIGNED:
                return "I"
            if basic in _UNSIGNED:
                return "U"
            if basic in _FLOAT:
                return "F"
            raise GoSourceError(f"predeclared type {basic} cannot be tabled")
        custom = CUSTOM.get((t.pkg, t.name))
        if custom is not None:
            self.struct_tags(t)
            return custom
        if t.name in self.package(t.pkg).marshalers:
            raise GoSourceError(f"{t.pkg}.{t.name} has its own MarshalJSON: add its "
                                "encoder to gotypes and CUSTOM")
        under = self.lookup(t)
        if isinstance(under, StructOf):
            key = self.key(t)
            self.layout(key, t)
            return f"T[{key!r}]"
        return self.expr(under)

    def struct_tags(self, t: Named) -> None:
        """Record the validate tags of a marshaler that is a struct (the validator sees its
        fields even though the JSON does not)."""
        under = self.lookup(t)
        if isinstance(under, StructOf) and t.pkg.startswith((CALICO_MODULE, API_MODULE)):
            tags = tuple(((tag_get(f.tag, "json") or "").split(",")[0] or f.name, v)
                         for f in under.fields
                         if f.name and (v := tag_get(f.tag, "validate"))
                         not in (None, "", "omitempty"))
            if tags:
                self.validate[self.key(t)] = tags

    def flatten(self, pkg: str, s: StructOf) -> Iterator[tuple[str, StructField]]:
        """The JSON-visible fields of ``s`` in encoding order, embedded structs inlined."""
        for f in s.fields:
            jtag = tag_get(f.tag, "json")
            jname = (jtag or "").split(",")[0]
            if jname == "-" and jtag == "-":
                continue
            if f.name == "":
                base = f.type.elem if isinstance(f.type, Pointer) else f.type
                if not isinstance(base, Named):
                    raise GoSourceError(f"embedded {base} in {pkg}")
                if not jname:
                    if base.name in self.package(base.pkg).marshalers:
                        # The embedded type's MarshalJSON is promoted: it writes the
                        # whole outer struct, which the tables cannot say.
                        raise GoSourceError(f"{base.pkg}.{base.name} is embedded in a struct "
                                            f"of {pkg} and promotes its MarshalJSON")
                    under = self.lookup(base)
                    if isinstance(under, StructOf):
                        yield from self.flatten(base.pkg, under)
                        continue
                if not base.name[0].isupper():
                    continue
                yield jname or base.name, StructField(base.name, f.type, f.tag)
                continue
            if not f.name[0].isupper():
                continue
            yield jname or f.name, f

    def layout(self, key: str, named: Named) -> None:
        if key in self.layouts:
            return
        self.layouts[key] = Layout((), (), ())  # placeholder: structs may refer to themselves
        under = self.lookup(named)
        assert isinstance(under, StructOf)
        fields = []
        go_fields = []
        seen: set[str] = set()
        for jname, f in self.flatten(named.pkg, under):
            if jname in seen:
                raise GoSourceError(f"{key}: two fields named {jname!r}")
            seen.add(jname)
            opts = (tag_get(f.tag, "json") or "").split(",")[1:]
            fields.append((jname, self.expr(f.type), "omitempty" in opts))
            go_fields.append((jname, f))
        tags = tuple((j, v) for j, f in go_fields
                     if (v := tag_get(f.tag, "validate")) not in (None, "", "omitempty"))
        if tags:
            self.validate[key] = tags
        self.layouts[key] = Layout(tuple(fields), tags, tuple(go_fields))

    def named(self, key: str) -> Named:
        prefix, name = key.split(".", 1)
        for path, p in PREFIXES.items():
            if p == prefix:
                return Named(path, name)
        raise GoSourceError(f"unknown prefix in {key}")

    def build(self) -> None:
        for key in ROOTS.values():
            self.layout(key, self.named(key))

    def config_fields(self, key: str) -> list[tuple[str, str, str, str]]:
        """(v1 config name, json name, Go type, configv1timescale) of each field of ``key``."""
        rows = []
        for jname, f in self.layouts[key].go_fields:
            rows.append((tag_get(f.tag, "confignamev1") or f.name, jname, self.shape(f.type),
                         tag_get(f.tag, "configv1timescale") or ""))
        return rows

    def shape(self, t: GoType) -> str:
        """How the configuration processor prints a value of type ``t``, spelt as a Go type:
        pointers, slices and the names of structs and marshalers kept, other named types
        replaced by their kind (``int``/``uint`` of any width, ``string``, ``map``), as
        ``fmt``'s ``%v`` and the processor's type switch treat them alike."""
        if isinstance(t, Pointer):
            return "*" + self.shape(t.elem)
        if isinstance(t, SliceOf):
            return "[]" + self.shape(t.elem)
        if isinstance(t, MapOf):
            return "map"
        if not isinstance(t, Named):
            raise GoSourceError(f"{t} has no configuration shape")
        if t.pkg == "":
            return ("int" if t.name in _SIGNED else "uint" if t.name in _UNSIGNED
                    else "float" if t.name in _FLOAT else t.name)
        if (t.pkg, t.name) in CUSTOM:
            return t.name
        under = self.lookup(t)
        return t.name if isinstance(under, StructOf) else self.shape(under)


# --- output ----------------------------------------------------------------------------

_IMPORTS = """\
# ruff: noqa: E501
from __future__ import annotations

from .gojson import BOOL as B
from .gojson import FLOAT as F
from .gojson import INT as I
from .gojson import STRING as S
from .gojson import UINT as U
from .gojson import Field, Struct
from .gojson import Map as M
from .gojson import Ptr as P
from .gojson import Slice as L
from .gotypes import (
{customs})

"""


def render(schema: Schema, calico: str, k8s: str) -> str:
    doc = f'''\
"""Go struct layouts of every value Typha serializes (field order, JSON names, omitempty).

Generated by ``tools/gen_goschema.py`` from the Go type definitions of Calico {calico}
(``api/pkg/apis/projectcalico/v3``, ``libcalico-go/lib/apis/internalapi``,
``libcalico-go/lib/backend/model``) and Kubernetes {k8s} (``core/v1`` Service,
``discovery/v1`` EndpointSlice, ``meta/v1`` ObjectMeta): change the generator, not this file.
Each entry is ``(json name, type, omitempty)`` in declaration order, embedded structs
flattened; types marshalled by their own ``MarshalJSON`` use the encoders of :mod:`.gotypes`.
"""

'''
    customs = "".join(f"    {c},\n" for c in sorted(set(CUSTOM.values())))
    out = [doc, _IMPORTS.format(customs=customs), "T: dict[str, Struct] = {n: Struct(n) for n in (\n"]
    out += [f"    {k!r},\n" for k in sorted(schema.layouts)]
    out.append(")}\n\n_LAYOUTS: dict[str, tuple[tuple[str, object, int], ...]] = {\n")
    for k in sorted(schema.layouts):
        out.append(f"    {k!r}: (\n")
        out += [f"        ({j!r}, {e}, {int(o)}),\n" for j, e, o in schema.layouts[k].fields]
        out.append("    ),\n")
    out.append("}\n\nfor _name, _fields in _LAYOUTS.items():\n"
               "    T[_name].define([Field(j, t, bool(o)) for j, t, o in _fields])"
               "  # type: ignore[arg-type]\n\n"
               "# The root type of each resource kind / v1 value.\n"
               "ROOTS: dict[str, Struct] = {\n")
    out += [f"    {k!r}: T[{v!r}],\n" for k, v in sorted(ROOTS.items())]
    out.append("}\n\n# ``validate`` struct tags (go-playground/validator), per struct and JSON "
               "field name.\nVALIDATE_TAGS: dict[str, dict[str, str]] = {\n")
    for k in sorted(schema.validate):
        out.append(f"    {k!r}: {{\n")
        out += [f"        {j!r}: {v!r},\n" for j, v in schema.validate[k]]
        out.append("    },\n")
    out.append("}\n")
    for name, key in CONFIG_TABLES:
        out.append(f"\n# {key.split('.')[1]}: (config name, json name, Go type, "
                   f"configv1timescale)\n{name}: tuple[tuple[str, str, str, str], ...] = (\n")
        out += [f"    {row!r},\n" for row in schema.config_fields(key)]
        out.append(")\n")
    return "".join(out)


# --- sources ---------------------------------------------------------------------------

def _go_mod_version(calico: Path, module: str) -> str:
    text = (calico / "go.mod").read_text("utf-8")
    m = re.search(rf"^\s*{re.escape(module)}\s+=>\s+{re.escape(module)}\s+(v\S+)", text, re.M) \
        or re.search(rf"^\s*{re.escape(module)}\s+(v\S+)", text, re.M)
    if m is None:
        raise GoSourceError(f"{calico / 'go.mod'} does not pin {module}")
    return m.group(1)


def _module_dir(module: str, version: str) -> Path:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    res = subprocess.run([go, "mod", "download", "-json", f"{module}@{version}"],
                         capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise GoSourceError(f"go mod download {module}@{version} failed: {res.stdout}{res.stderr}")
    return Path(json.loads(res.stdout)["Dir"])


def calico_source(calico: Path, k8s_api: Path | None, apimachinery: Path | None,
                  ) -> tuple[dict[str, Path], dict[str, str]]:
    """The module directories to read and what the manifest says of them."""
    api_version = _go_mod_version(calico, K8S_API)
    machinery_version = _go_mod_version(calico, APIMACHINERY)
    dirs = {
        CALICO_MODULE: calico,
        API_MODULE: calico / "api",
        K8S_API: k8s_api or _module_dir(K8S_API, api_version),
        APIMACHINERY: apimachinery or _module_dir(APIMACHINERY, machinery_version),
    }
    source = {
        **git_source(calico),
        K8S_API: api_version,
        APIMACHINERY: machinery_version,
    }
    return dirs, source


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calico", type=Path, required=True,
                        help="a Calico git checkout (the tag the tables target)")
    parser.add_argument("--k8s-api", type=Path, help="a k8s.io/api source tree "
                        "(default: the Go module cache, at the version Calico pins)")
    parser.add_argument("--apimachinery", type=Path, help="a k8s.io/apimachinery source tree")
    parser.add_argument("--check", action="store_true",
                        help="only report whether goschema.py is what the checkout gives")
    args = parser.parse_args(argv)
    dirs, source = calico_source(args.calico.resolve(), args.k8s_api, args.apimachinery)
    schema = Schema(dirs)
    schema.build()
    text = render(schema, source["calico_version"], source[K8S_API])
    if args.check:
        same = OUT.read_text("utf-8") == text
        if not same:
            print(f"{OUT} differs from what {args.calico} gives", file=sys.stderr)
        return 0 if same else 1
    OUT.write_text(text, "utf-8")
    record(MANIFEST, ROOT, [OUT], {"generator": "tools/gen_goschema.py", **source})
    for problem in stale(MANIFEST, ROOT):
        print(problem, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
