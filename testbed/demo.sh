#!/usr/bin/env bash
# The demo: `trio-typha demo` -- the test bed Kubernetes API server with a synthetic cluster,
# three trio-typha replicas in KDD mode, the calico-typha EndpointSlice, a fleet of agents on
# both protocols, NetworkPolicy churn, a live dashboard and a convergence verdict.
# Installs what it needs on a fresh Debian machine first; arguments go to `trio-typha demo`
# (e.g. --size medium --agents 500 --duration 120 --kill-replica-at 30 --json).
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/bootstrap.sh
bootstrap_env
exec .venv/bin/trio-typha demo "$@"
