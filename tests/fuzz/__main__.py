"""Coverage-guided fuzzing with atheris (libFuzzer) of the sans-IO cores.

    python -m tests.fuzz gob_decoder --seconds 600        # one target, the long run
    python -m tests.fuzz all --seconds 5                   # every target, CI's short budget

Each target runs in its own process (libFuzzer owns the process and exits at the end);
``--corpus DIR`` keeps what it found between runs.  A crash leaves ``crash-*`` in the
working directory and a non-zero exit.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile


def _fuzz_one(name: str, seconds: float, corpus: str | None, rss_mb: int) -> None:
    import atheris

    # Nothing of trio_typha may be imported before this: only modules imported inside the
    # block are instrumented for coverage.
    with atheris.instrument_imports(include=["trio_typha", "h2", "hpack", "hyperframe"]):
        from tests.fuzz import targets
    target = targets.TARGETS[name]
    argv = [sys.argv[0], f"-max_total_time={int(seconds)}", f"-rss_limit_mb={rss_mb}",
            "-timeout=10", "-print_final_stats=1"]
    if corpus is None:
        corpus = tempfile.mkdtemp(prefix=f"fuzz-{name}-")
    os.makedirs(corpus, exist_ok=True)
    for i, seed in enumerate(targets.seeds(name)):
        with open(os.path.join(corpus, f"seed-{i}"), "wb") as fh:
            fh.write(seed)
    argv.append(corpus)
    atheris.Setup(argv, target)
    atheris.Fuzz()


#: The targets in tests/fuzz/targets.py (not imported here: see _fuzz_one).
TARGETS = ("kdd_watch_stream", "kdd_list", "etcd_watch_stream", "etcd_range", "gob_decoder",
           "gob_session", "grpc_framing", "h2_core")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("target", choices=[*TARGETS, "all"])
    p.add_argument("--seconds", type=float, default=60.0, help="per target")
    p.add_argument("--corpus", default=None, help="corpus directory (one target only)")
    p.add_argument("--rss-mb", type=int, default=1024)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        _fuzz_one(args.target, args.seconds, args.corpus, args.rss_mb)
        return 0
    names = list(TARGETS) if args.target == "all" else [args.target]
    failed = []
    for name in names:
        cmd = [sys.executable, "-m", "tests.fuzz", name, "--child", "--seconds",
               str(args.seconds), "--rss-mb", str(args.rss_mb)]
        if args.corpus:
            cmd += ["--corpus", args.corpus]
        print(f"== fuzzing {name} for {args.seconds:g}s", flush=True)
        if subprocess.run(cmd).returncode != 0:
            failed.append(name)
    if failed:
        print(f"FAILED: {', '.join(failed)}", flush=True)
        return 1
    print(f"all {len(names)} targets ran clean", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
