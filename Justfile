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
# Docker if present, else podman.
engine := `command -v docker >/dev/null 2>&1 && echo docker || echo podman`
calico_version := "v3.32.1"
kind_context := "kind-trio-typha"

# Build the trio-typha image.
image TAG="trio-typha:dev":
    {{engine}} build -t {{TAG}} -f Containerfile .

# Certificates for the mTLS overlay (deploy/overlays/mtls/certs, never committed).
certs DIR="deploy/overlays/mtls/certs":
    bash deploy/certs.sh {{DIR}}

# kind cluster (1 control plane + 3 workers) running Calico v3.32.1 with trio-typha as its Typha.
kind-up:
    kind create cluster --config kind-config.yaml
    {{engine}} build -t trio-typha:dev -f Containerfile .
    mkdir -p .kind
    {{engine}} save -o .kind/trio-typha.tar trio-typha:dev
    kind load image-archive .kind/trio-typha.tar --name trio-typha
    curl -fsSL --retry 3 -o deploy/overlays/kind-calico/calico-typha.yaml https://raw.githubusercontent.com/projectcalico/calico/{{calico_version}}/manifests/calico-typha.yaml
    kubectl --context {{kind_context}} apply --server-side --force-conflicts -k deploy/overlays/kind-calico
    kubectl --context {{kind_context}} -n kube-system rollout status deployment/calico-typha --timeout=600s
    kubectl --context {{kind_context}} -n kube-system rollout status daemonset/calico-node --timeout=900s
    kubectl --context {{kind_context}} -n kube-system wait --for=condition=Ready pod -l k8s-app=calico-node --timeout=600s
    kubectl --context {{kind_context}} -n kube-system wait --for=condition=Ready pod -l k8s-app=calico-typha --timeout=600s
    kubectl --context {{kind_context}} -n kube-system get pods -o wide -l 'k8s-app in (calico-node,calico-typha)'
    @echo "kind-up: cluster trio-typha (context {{kind_context}}) runs Calico {{calico_version}}; calico-typha is trio-typha:dev with RBAC trio-typha; every calico-node and calico-typha pod is Ready"

# The e2e suite against the current kube-context (tests/e2e; without a cluster: `just test tests/e2e`).
e2e *ARGS:
    TRIO_TYPHA_E2E_KUBECONFIG="${TRIO_TYPHA_E2E_KUBECONFIG:-${KUBECONFIG:-$HOME/.kube/config}}" .venv/bin/pytest tests/e2e -v {{ARGS}}

# NetworkPolicy churn against the current kube-context, e.g. `just churn 20 60`.
churn RATE="10" SECONDS="60" *ARGS:
    .venv/bin/python -m testbed.churn --rate {{RATE}} --seconds {{SECONDS}} --record churn-writes.jsonl {{ARGS}}

# Delete the kind cluster.
kind-down:
    kind delete cluster --name trio-typha
