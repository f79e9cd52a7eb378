"""Regenerate the goldens of tests/unit/model/golden/ by running Calico's own code on their inputs.

    .venv/bin/python tools/gen_goldens.py --calico /tmp/calico           # rewrite the goldens
    .venv/bin/python tools/gen_goldens.py --calico /tmp/calico --check   # exit 1 if they differ

Each golden holds inputs written for the tests and what Calico returned for them.  The tool
takes the inputs from the committed files, builds the Go program in ``tools/goldens/``
against the checkout (a ``go.mod`` written into a directory under the system's temporary
directory, with ``replace github.com/projectcalico/calico => <checkout>``, so nothing of
Calico enters the repository), runs it once on all inputs, and writes each file again with
the answers; then it records their hashes, the generator and the checkout's version and
commit in ``goldens.generated.json``, which ``tests/unit/test_generated.py`` checks.

The build uses ``GOTOOLCHAIN=go1.25.11`` (the toolchain Calico's ``go.mod`` names): Calico
built by a newer Go panics in json-iterator.  ``go`` fetches that toolchain and Calico's
modules through the Go module proxy the first time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generated import git_source, record, stale  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "unit" / "model" / "golden"
MANIFEST = GOLDEN / "goldens.generated.json"
PROGRAM = Path(__file__).resolve().parent / "goldens"
GOTOOLCHAIN = "go1.25.11"
CALICO_MODULE = "github.com/projectcalico/calico"

# Each golden by name, and the fields of a case that are Calico's answer (the rest is input).
ANSWERS: dict[str, tuple[str, ...]] = {
    "calico_v3": ("kvs",),
    "validation": ("valid",),
    "etcd_ipam": ("key", "value"),
    "kdd_optional_apis": ("kvs",),
}


class GoldenError(Exception):
    """The goldens, the checkout or the Go program's answers are not what the tool expects."""


def inputs(golden: Path = GOLDEN) -> dict[str, list[dict[str, Any]]]:
    """The inputs of every golden: its cases without the answer fields."""
    out = {}
    for name, answer in ANSWERS.items():
        cases = json.loads((golden / f"{name}.json").read_text("utf-8"))
        out[name] = [{k: v for k, v in case.items() if k not in answer} for case in cases]
    return out


def merge(name: str, cases: list[dict[str, Any]], answers: list[Any]) -> list[dict[str, Any]]:
    """Each case of golden ``name`` followed by its answer fields, as the golden holds them."""
    if len(answers) != len(cases):
        raise GoldenError(f"{name}: {len(cases)} inputs but {len(answers)} answers")
    fields = ANSWERS[name]
    out = []
    for case, answer in zip(cases, answers, strict=True):
        if len(fields) == 1:
            out.append({**case, fields[0]: answer})
        elif isinstance(answer, Mapping) and set(answer) == set(fields):
            out.append({**case, **{f: answer[f] for f in fields}})
        else:
            raise GoldenError(f"{name}: answer {answer!r} does not have the fields {fields}")
    return out


def render(cases: list[dict[str, Any]]) -> str:
    """A golden file's text: one JSON layout for all of them."""
    return json.dumps(cases, indent=1, ensure_ascii=False) + "\n"


def go_mod(calico: Path, calico_go_mod: str) -> str:
    """The go.mod of the program: Calico's module replaced by the checkout, and the checkout's
    own replace directives (a dependency's replaces do not apply), local paths made absolute."""
    go = re.search(r"^go (\S+)", calico_go_mod, re.M)
    if go is None:
        raise GoldenError("the checkout's go.mod names no Go version")
    replaces = [f"\t{CALICO_MODULE} => {calico}"]
    blocks = re.findall(r"^replace \((.*?)^\)", calico_go_mod, re.M | re.S)
    singles = re.findall(r"^replace ([^(\n].*)$", calico_go_mod, re.M)
    for line in [*"\n".join(blocks).splitlines(), *singles]:
        line = line.split("//", 1)[0].strip()
        if not line:
            continue
        old, new = (part.strip() for part in line.split("=>"))
        if new.startswith(("./", "../")):
            new = str((calico / new).resolve())
        replaces.append(f"\t{old} => {new}")
    return (f"module goldens\n\ngo {go.group(1)}\n\n"
            f"require {CALICO_MODULE} v0.0.0-00010101000000-000000000000\n\n"
            "replace (\n" + "\n".join(replaces) + "\n)\n")


def go_env() -> dict[str, str]:
    return {**os.environ, "GOTOOLCHAIN": GOTOOLCHAIN, "GOFLAGS": "-mod=mod"}


def build(calico: Path, workdir: Path) -> Path:
    """Build tools/goldens against the checkout in ``workdir``; the binary's path."""
    for src in PROGRAM.glob("*.go"):
        shutil.copy(src, workdir)
    (workdir / "go.mod").write_text(go_mod(calico, (calico / "go.mod").read_text("utf-8")),
                                    "utf-8")
    shutil.copy(calico / "go.sum", workdir / "go.sum")
    binary = workdir / "goldens"
    res = subprocess.run(["go", "build", "-o", str(binary), "."], cwd=workdir, env=go_env(),
                         capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise GoldenError(f"go build against {calico} failed:\n{res.stderr}")
    return binary


def answer(binary: Path, cases: dict[str, list[dict[str, Any]]]) -> dict[str, list[Any]]:
    res = subprocess.run([str(binary)], input=json.dumps(cases), capture_output=True,
                         text=True, check=False)
    if res.returncode != 0:
        raise GoldenError(f"the Go program failed: {res.stderr.strip()}")
    out: dict[str, list[Any]] = json.loads(res.stdout)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calico", type=Path, required=True,
                        help="a Calico git checkout (v3.32.1 for the committed goldens)")
    parser.add_argument("--check", action="store_true",
                        help="only report whether the goldens are what the checkout gives")
    args = parser.parse_args(argv)
    calico = args.calico.resolve()
    if not (calico / "go.mod").is_file():
        raise SystemExit(f"{calico} holds no go.mod: not a Calico checkout")
    source = git_source(calico)
    print(f"building tools/goldens against {calico} ({source['calico_version']}) with "
          f"GOTOOLCHAIN={GOTOOLCHAIN} (Calico built by a newer Go panics in json-iterator)",
          file=sys.stderr)
    started = time.monotonic()
    cases = inputs()
    try:
        with tempfile.TemporaryDirectory(prefix="trio-typha-goldens-") as tmp:
            answers = answer(build(calico, Path(tmp)), cases)
    except GoldenError as exc:
        raise SystemExit(str(exc)) from exc
    texts = {name: render(merge(name, cases[name], answers[name])) for name in ANSWERS}
    paths = {name: GOLDEN / f"{name}.json" for name in ANSWERS}
    differ = [name for name in ANSWERS if paths[name].read_text("utf-8") != texts[name]]
    counts = ", ".join(f"{len(cases[name])} {name}" for name in ANSWERS)
    print(f"answered {counts} in {time.monotonic() - started:.1f}s", file=sys.stderr)
    for name in differ:
        same = json.loads(paths[name].read_text("utf-8")) == json.loads(texts[name])
        print(f"{paths[name].relative_to(ROOT)}: "
              f"{'same content, other layout' if same else 'content differs'}", file=sys.stderr)
    if args.check:
        return 1 if differ else 0
    for name in ANSWERS:
        paths[name].write_text(texts[name], "utf-8")
    record(MANIFEST, ROOT, list(paths.values()),
           {"generator": "tools/gen_goldens.py", "go_toolchain": GOTOOLCHAIN, **source})
    for problem in stale(MANIFEST, ROOT):
        print(problem, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
