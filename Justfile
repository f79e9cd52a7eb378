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
