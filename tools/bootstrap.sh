#!/usr/bin/env bash
# Sourced by tests/run.sh and testbed/demo.sh: makes a fresh Debian machine ready.
#   bootstrap_env            python3-venv + .venv with trio-typha and its test bed
#                            (trio-typha-testbed, testbed/: the demo's API server and fleet)
#   bootstrap_env e2e        ... plus the test extras (`just e2e` against a cluster)
#   bootstrap_env test       ... plus the test extras, etcd-server, Go and chromium
set -euo pipefail

_sudo() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

bootstrap_env() {
  local want=${1:-}
  local missing=()
  python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
  if [ "$want" = test ]; then
    command -v etcd >/dev/null 2>&1 || [ -x /usr/bin/etcd ] || missing+=(etcd-server)
    command -v go >/dev/null 2>&1 || [ -x /usr/local/go/bin/go ] || missing+=(golang-go)
    # The stalled-watch tests drop a connection's packets inside a network namespace.
    command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || missing+=(nftables)
    command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || missing+=(iproute2)
    # headless Chromium loads the demo's dashboard in tests/integration/test_demo.py
    command -v chromium >/dev/null 2>&1 || missing+=(chromium)
    # deploy/: kustomize renders through kubectl; the mTLS overlay's certificates need openssl
    command -v kubectl >/dev/null 2>&1 || missing+=(kubernetes-client)
    command -v openssl >/dev/null 2>&1 || missing+=(openssl)
    # the build step's compiled model (setup.py, mypyc): tests/integration/test_native_build.py
    command -v cc >/dev/null 2>&1 || missing+=(gcc)
    python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
      || missing+=(python3-dev)
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    echo "== installing ${missing[*]} (apt)" >&2
    _sudo apt-get update -qq
    _sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
  fi
  if [ -x /usr/local/go/bin/go ]; then export PATH="$PATH:/usr/local/go/bin"; fi
  if [ ! -x .venv/bin/python ]; then
    echo "== creating .venv" >&2
    python3 -m venv .venv
  fi
  local spec=.
  case "$want" in test|e2e) spec='.[test]';; esac
  # Both distributions in one resolution: the test bed requires this trio-typha.
  # pip's and setuptools' chatter goes to a log, shown only if the install fails.
  if ! { .venv/bin/python -m pip install -q --upgrade pip &&
         .venv/bin/python -m pip install -q -e "$spec" -e ./testbed; } \
       >.venv/pip-install.log 2>&1; then
    cat .venv/pip-install.log >&2
    echo "pip install failed (log: .venv/pip-install.log)" >&2
    return 1
  fi
}
