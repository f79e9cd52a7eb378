#!/usr/bin/env bash
# Prints the container engine to use, docker or podman: the first whose daemon (or podman's
# own runtime) answers `info`.  A docker CLI without a reachable daemon does not count.
if docker info >/dev/null 2>&1; then
  echo docker
elif podman info >/dev/null 2>&1; then
  echo podman
else
  echo "no container engine answers: docker info and podman info both fail" >&2
  exit 1
fi
