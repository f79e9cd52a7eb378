"""Regenerate the protobuf modules from proto/: typha.proto (the Sync service) and
etcd.proto (the slice of etcd's API the etcd datastore speaks).

    .venv/bin/python tools/gen_proto.py           # rewrite every <name>_pb2.py(i)
    .venv/bin/python tools/gen_proto.py --check   # exit 1 if the checked-in files are stale

The output depends only on the .proto files and the grpcio-tools (protoc) version, so the
check is exact.  Only message code is generated: both ends speak HTTP/2 themselves, and
gRPC stubs are a test's business (tests generate theirs into a temp dir).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
#: Each .proto file and the package directory its modules go to.
PROTOS = {"typha.proto": ROOT / "trio_typha" / "protocols" / "grpc",
          "etcd.proto": ROOT / "trio_typha" / "datastore"}


def generated(proto: str) -> tuple[str, str]:
    stem = proto.removesuffix(".proto")
    return f"{stem}_pb2.py", f"{stem}_pb2.pyi"


def generate(proto: str, out_dir: Path) -> None:
    """Run grpcio-tools' protoc on proto/``proto``, writing into ``out_dir``."""
    from grpc_tools import protoc  # test-only dependency, imported on use

    args = ["protoc", f"-I{PROTO_DIR}", f"--python_out={out_dir}", f"--pyi_out={out_dir}",
            str(PROTO_DIR / proto)]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {PROTO_DIR / proto}")


def stale_files() -> list[Path]:
    """The checked-in generated files that differ from a fresh generation."""
    stale = []
    with tempfile.TemporaryDirectory() as tmp:
        for proto, out_dir in PROTOS.items():
            generate(proto, Path(tmp))
            stale += [out_dir / name for name in generated(proto)
                      if not (out_dir / name).exists()
                      or (Path(tmp) / name).read_bytes() != (out_dir / name).read_bytes()]
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="only verify that the checked-in files are up to date")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files()
        for path in stale:
            print(f"stale: {path} (run tools/gen_proto.py)", file=sys.stderr)
        return 1 if stale else 0
    for proto, out_dir in PROTOS.items():
        generate(proto, out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
