# trio-typha tasks.  `just` is optional: every recipe is a plain command.

default:
    @just --list

# Run the whole test suite (installs its own dependencies).
test *ARGS:
    bash tests/run.sh {{ARGS}}

# The demo: API server, three replicas, an agent fleet, churn, dashboard, verdict.
# e.g. `just demo --size medium --agents 500 --kill-replica-at 30`
demo *ARGS:
    bash testbed/demo.sh {{ARGS}}

# Serve a synthetic cluster from the memory datastore.
serve CLUSTER="small":
    .venv/bin/trio-typha serve --datastore memory --demo-cluster {{CLUSTER}} --health --metrics

# Benchmark scenario (storm, steady, memory, startup), e.g. `just bench steady --clients 100 --rate 100`.
bench SCENARIO="steady" *ARGS:
    .venv/bin/python -m bench {{SCENARIO}} {{ARGS}}

# Regenerate the protobuf module from proto/typha.proto.
proto:
    .venv/bin/python tools/gen_proto.py

lint:
    .venv/bin/ruff check .

# --- container image and the kind test bed (docs/deploy.md) ---------------------------------
# Variables are evaluated only by the recipes that use them.
set lazy

# The image reference, read from the one place it is set: deploy/base/kustomization.yaml
# (`images:`, newName:newTag), which every overlay inherits.
image_ref := replace_regex(read("deploy/base/kustomization.yaml"), '(?s).*\n\s*newName:\s*"?([^"\s]+)"?\s*\n\s*newTag:\s*"?([^"\s]+)"?\s*\n.*', '$1:$2')
# The container engine whose daemon answers (a docker CLI alone is not enough), else podman.
engine := `bash tools/engine.sh`
calico_version := "v3.32.1"
kind_cluster := "trio-typha"
kind_context := "kind-trio-typha"
# The kube-context `e2e` and `churn` act on: the kind cluster's unless named explicitly,
# e.g. `just context=my-test-cluster e2e`.
context := kind_context
# `just mtls=1 kind-up`: calico-node and trio-typha with mutual TLS, in the same one apply.
mtls := ""
kind_overlay := if mtls == "1" { "deploy/overlays/kind-calico-mtls" } else if mtls == "" { "deploy/overlays/kind-calico" } else { error("mtls is 1 or unset, not " + mtls) }
mtls_certs := "deploy/components/mtls/certs"
calico_manifest := "deploy/overlays/kind-calico/calico/calico-typha.yaml"

# Docker's image format with either engine: podman's default (OCI) drops the HEALTHCHECK
# (BUILDAH_FORMAT is podman build's --format; docker ignores it). DOCKER_BUILDKIT: RUN --mount.
# Build the image as the reference set in deploy/base/kustomization.yaml.
image:
    DOCKER_BUILDKIT=1 BUILDAH_FORMAT=docker {{engine}} build -t {{image_ref}} -f Containerfile .

# Push the image to the registry its reference names (set it in deploy/base/kustomization.yaml).
push: _require-registry
    {{engine}} push {{image_ref}}

[private]
_require-registry:
    @case "{{image_ref}}" in localhost/*) echo "push: {{image_ref}} names no registry: set newName in deploy/base/kustomization.yaml to your registry's repository (docs/deploy.md)" >&2; exit 2;; esac

# Certificates for the mTLS overlays (deploy/components/mtls/certs, never committed).
certs DIR=mtls_certs:
    bash deploy/certs.sh {{DIR}}

# Run after `kubectl apply -k deploy/overlays/mtls` where Calico's manifest or operator owns
# calico-node; the calico-node pods restart with it (the kind bed: `just mtls=1 kind-up`).
# Point calico-node (kube-context `context`) at the mTLS overlay's certificates.
mtls-calico-node: _require-context
    kubectl --context {{context}} -n kube-system patch daemonset calico-node --type strategic --patch-file deploy/components/calico-node-mtls/calico-node-tls.yaml

# Every step can be re-run: after a failure, run `just kind-up` again; what is done already
# (the cluster, an image the nodes hold, the manifest, the certificates) is not done twice.
# kind is told the engine (KIND_EXPERIMENTAL_PROVIDER): its own detection takes a docker CLI
# without a daemon.  `just mtls=1 kind-up`: with mutual TLS (overlays/kind-calico-mtls).
# kind cluster (1 control plane + 3 workers): Calico v3.32.1 with trio-typha as its Typha.
kind-up:
    KIND_EXPERIMENTAL_PROVIDER={{engine}} kind get clusters | grep -qxF {{kind_cluster}} || KIND_EXPERIMENTAL_PROVIDER={{engine}} kind create cluster --config kind-config.yaml
    DOCKER_BUILDKIT=1 BUILDAH_FORMAT=docker {{engine}} build -t {{image_ref}} -f Containerfile .
    bash tools/kind-load.sh {{engine}} {{kind_cluster}} {{image_ref}} .kind/trio-typha.tar
    test -s {{calico_manifest}} || { curl -fsSL --retry 3 -o {{calico_manifest}}.part https://raw.githubusercontent.com/projectcalico/calico/{{calico_version}}/manifests/calico-typha.yaml && mv {{calico_manifest}}.part {{calico_manifest}}; }
    test -z "{{mtls}}" || test -s {{mtls_certs}}/ca.crt || bash deploy/certs.sh {{mtls_certs}}
    kubectl --context {{kind_context}} apply --server-side --force-conflicts -k {{kind_overlay}}
    kubectl --context {{kind_context}} -n kube-system rollout status deployment/calico-typha --timeout=600s
    kubectl --context {{kind_context}} -n kube-system rollout status daemonset/calico-node --timeout=900s
    kubectl --context {{kind_context}} -n kube-system wait --for=condition=Ready pod -l k8s-app=calico-node --timeout=600s
    kubectl --context {{kind_context}} -n kube-system wait --for=condition=Ready pod -l k8s-app=calico-typha --timeout=600s
    kubectl --context {{kind_context}} -n kube-system get pods -o wide -l 'k8s-app in (calico-node,calico-typha)'
    @echo "kind-up: cluster {{kind_cluster}} (context {{kind_context}}) runs Calico {{calico_version}}; calico-typha is {{image_ref}} with RBAC trio-typha{{ if mtls == "1" { ", mutual TLS with calico-node" } else { "" } }}; every calico-node and calico-typha pod is Ready"

# Makes the .venv first, as tests/run.sh does.  Without a cluster: `just test tests/e2e`.
# The e2e suite against kube-context `context` (default kind-trio-typha; `just context=NAME e2e`).
e2e *ARGS: _require-context
    bash -c 'source tools/bootstrap.sh && bootstrap_env e2e'
    TRIO_TYPHA_E2E_CONTEXT={{context}} .venv/bin/pytest tests/e2e -v {{ARGS}}

# Its namespaces are deleted at the end, also after a failure or Ctrl-C.
# NetworkPolicy churn against kube-context `context`, e.g. `just churn 20 60` (writes/s, seconds).
churn RATE="10" SECONDS="60" *ARGS: _require-context
    bash -c 'source tools/bootstrap.sh && bootstrap_env'
    .venv/bin/python -m testbed.churn --context {{context}} --cleanup --rate {{RATE}} --seconds {{SECONDS}} --record churn-writes.jsonl {{ARGS}}

# Refuses a kube-context that the kubeconfig does not have (no fallback to the current one).
[private]
_require-context:
    @kubectl config get-contexts -o name | grep -qxF {{context}} || { echo "no kube-context {{context}}: run just kind-up, or name the cluster to use: just context=NAME ..." >&2; exit 2; }

# Delete the kind cluster, the image archive and the downloaded Calico manifest.
kind-down:
    KIND_EXPERIMENTAL_PROVIDER={{engine}} kind delete cluster --name {{kind_cluster}}
    rm -rf .kind {{calico_manifest}} {{calico_manifest}}.part
