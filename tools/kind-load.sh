#!/usr/bin/env bash
# Loads IMAGE into the nodes of kind cluster CLUSTER that do not already hold it, so that
# re-running `just kind-up` after an unchanged build saves and loads nothing.  A node holds
# it when its containerd has IMAGE with the image ID the engine reports (the config digest).
# Docker's containerd image store reports another digest as the ID: then every node is
# loaded.
#   bash tools/kind-load.sh ENGINE CLUSTER IMAGE ARCHIVE
set -euo pipefail
engine=$1 cluster=$2 image=$3 archive=$4
export KIND_EXPERIMENTAL_PROVIDER=$engine
want=$("$engine" image inspect --format '{{.Id}}' "$image")
want=${want#sha256:}
stale=()
for node in $(kind get nodes --name "$cluster"); do
  # crictl's JSON: {"status": {"id": "sha256:...", "repoTags": [...], ...}, "info": ...}
  have=$("$engine" exec "$node" crictl inspecti -o json "$image" 2>/dev/null \
    | sed -n 's/^ *"id": *"\([^"]*\)".*/\1/p' | head -n 1) || have=""
  [ "${have#sha256:}" = "$want" ] || stale+=("$node")
done
if [ ${#stale[@]} -eq 0 ]; then
  echo "kind-load: every node of $cluster has $image (image ID $want) already"
  exit 0
fi
mkdir -p "$(dirname "$archive")"
# Written aside and moved into place, so that a failed save leaves no truncated archive.
"$engine" save -o "$archive.part" "$image"
mv "$archive.part" "$archive"
nodes=$(IFS=,; echo "${stale[*]}")
echo "kind-load: loading $image (image ID $want) into $nodes"
kind load image-archive "$archive" --name "$cluster" --nodes "$nodes"
