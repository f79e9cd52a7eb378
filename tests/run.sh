#!/usr/bin/env bash
# Runs trio-typha's whole test suite on a fresh Debian machine, installing what it needs
# (python3-venv, etcd-server for the real-etcd tests, Go for the encoding/gob compatibility
# tests, and a virtualenv with the test extras).  Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/bootstrap.sh
bootstrap_env test
echo "== ruff"
.venv/bin/ruff check .
echo "== mypy (strict, trio_typha/)"
.venv/bin/mypy
echo "== pytest"
exec .venv/bin/pytest "$@"
