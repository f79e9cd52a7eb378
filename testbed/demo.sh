#!/usr/bin/env bash
# The embedded demo: trio-typha serving a synthetic cluster from its memory datastore with
# pod and NetworkPolicy churn, and debugging clients on both protocols of port 5473.
# Installs what it needs on a fresh Debian machine first.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/bootstrap.sh
bootstrap_env
PORT=${PORT:-5473}
HEALTH_PORT=${HEALTH_PORT:-9098}
.venv/bin/trio-typha serve --datastore memory --demo-cluster "${CLUSTER:-small}" \
  --churn "${CHURN:-5}" --port "$PORT" --health --health-port "$HEALTH_PORT" &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
echo "== waiting for readiness on :$HEALTH_PORT"
for _ in $(seq 1 100); do
  if .venv/bin/python -c "import sys,urllib.request;urllib.request.urlopen('http://127.0.0.1:$HEALTH_PORT/readiness',timeout=1)" 2>/dev/null; then break; fi
  sleep 0.2
done
echo "== calico-node's protocol (gob + snappy), every syncer type"
for syncer in felix bgp tunnel-ip-allocation node-status; do
  .venv/bin/trio-typha client --addr "127.0.0.1:$PORT" --syncer "$syncer" --once
done
echo "== the gRPC Sync service on the same port"
.venv/bin/trio-typha client --addr "127.0.0.1:$PORT" --protocol grpc --syncer felix --once
echo "== five seconds of live updates (felix, gRPC)"
timeout 5 .venv/bin/trio-typha client --addr "127.0.0.1:$PORT" --protocol grpc --syncer felix || true
