#!/usr/bin/env bash
# Build the Go interop tool into tests/gotools/bin/gobtool and print its path.
# Needs Go (>= 1.19, Debian bookworm's golang-go) and the Go module proxy for github.com/golang/snappy (first build only).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export PATH="$PATH:/usr/local/go/bin"
cd "$here"
go build -mod=mod -o bin/gobtool . >&2
echo "$here/bin/gobtool"
