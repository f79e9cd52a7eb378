"""Manifests of generated files: what wrote them, from which source, and their sha256.

A generator calls :func:`record` after writing its files; ``tests/unit/test_generated.py``
calls :func:`stale` on every manifest, so a file edited by hand (or a generator run whose
output was not committed) fails the suite instead of drifting from its source.

    .venv/bin/python tools/generated.py check

``record`` notes the hashes of files some other run wrote, with the checkout's version and
commit, nothing else; the generators (gen_goschema.py, gen_goldens.py) record their own.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def manifests() -> list[Path]:
    """Every manifest in the repository (generated code and test goldens)."""
    return sorted(p for d in ("trio_typha", "tests") for p in (ROOT / d).rglob("*.generated.json"))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def record(manifest: Path, root: Path, files: list[Path], source: dict[str, str]) -> None:
    """Write ``manifest``: ``source`` (generator, versions, commits) and each file's hash,
    by its path relative to ``root``."""
    data = {**source, "files": {f.relative_to(root).as_posix(): sha256(f)
                                for f in sorted(files) if f != manifest}}
    manifest.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", "utf-8")


def stale(manifest: Path, root: Path) -> list[str]:
    """One line per file of ``manifest`` that is missing or whose bytes are not the ones
    recorded; empty when every file is as its generator left it."""
    data = json.loads(manifest.read_text("utf-8"))
    problems = []
    for name, digest in sorted(data["files"].items()):
        path = root / name
        if not path.exists():
            problems.append(f"{name}: missing (recorded by {data['generator']})")
        elif sha256(path) != digest:
            problems.append(f"{name}: not what {data['generator']} wrote; change the "
                            "generator or its source and run it again")
    return problems


def git_source(checkout: Path) -> dict[str, str]:
    """The version (``git describe``) and commit of a Calico git checkout."""
    def git(*args: str) -> str:
        res = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True,
                             text=True, check=False)
        if res.returncode != 0:
            raise SystemExit(f"{checkout} is not a git checkout: {res.stderr.strip()}")
        return res.stdout.strip()

    return {"calico_version": git("describe", "--tags", "--always"),
            "calico_commit": git("rev-parse", "HEAD")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="check or record generated-file manifests")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="report every generated file that is not as recorded")
    rec = sub.add_parser("record", help="record files written by a run of Calico's own code "
                         "(the goldens), after that run")
    rec.add_argument("manifest", type=Path)
    rec.add_argument("files", type=Path, nargs="+")
    rec.add_argument("--calico", type=Path, required=True, help="the checkout that was run")
    rec.add_argument("--generator", required=True, help="what produced the files")
    args = parser.parse_args(argv)
    if args.command == "record":
        record(args.manifest.resolve(), ROOT, [f.resolve() for f in args.files],
               {"generator": args.generator, **git_source(args.calico)})
        return 0
    problems = [p for m in manifests() for p in stale(m, ROOT)]
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
