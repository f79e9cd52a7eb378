"""Regenerate the protobuf module of the gRPC service from proto/typha.proto.

    .venv/bin/python tools/gen_proto.py           # rewrite trio_typha/protocols/grpc/typha_pb2.py(i)
    .venv/bin/python tools/gen_proto.py --check   # exit 1 if the checked-in files are stale

The output depends only on the .proto file and the grpcio-tools (protoc) version, so the
check is exact.  Only message code is generated: the server speaks HTTP/2 itself, and
gRPC client stubs are a client's business (tests generate theirs into a temp dir).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
PROTO_FILE = "typha.proto"
OUT_DIR = ROOT / "trio_typha" / "protocols" / "grpc"
GENERATED = ("typha_pb2.py", "typha_pb2.pyi")


def generate(out_dir: Path) -> None:
    """Run grpcio-tools' protoc on proto/typha.proto, writing into ``out_dir``."""
    from grpc_tools import protoc  # test-only dependency, imported on use

    args = ["protoc", f"-I{PROTO_DIR}", f"--python_out={out_dir}", f"--pyi_out={out_dir}",
            str(PROTO_DIR / PROTO_FILE)]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {PROTO_DIR / PROTO_FILE}")


def stale_files() -> list[str]:
    """Names of the checked-in generated files that differ from a fresh generation."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        return [name for name in GENERATED
                if not (OUT_DIR / name).exists()
                or (Path(tmp) / name).read_bytes() != (OUT_DIR / name).read_bytes()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="only verify that the checked-in files are up to date")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files()
        for name in stale:
            print(f"stale: {OUT_DIR / name} (run tools/gen_proto.py)", file=sys.stderr)
        return 1 if stale else 0
    generate(OUT_DIR)
    return 0


if __name__ == "__main__":
    sys.exit(main())
