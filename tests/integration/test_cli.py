"""The trio-typha command: configuration errors exit non-zero naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.upper().startswith("TYPHA_")}
    full_env["TYPHA_SERVERWORKERS"] = "1"  # one process (tests/conftest.py)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "trio_typha", *args], env=full_env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("env", "args", "needle"), [
    ({"TYPHA_SERVERPORT": "99999"}, [], "TYPHA_SERVERPORT"),
    ({"TYPHA_DATASTORETYPE": "zookeeper"}, [], "TYPHA_DATASTORETYPE"),
    ({}, ["--datastore", "memory", "--set", "ServerPongTimeoutSecs=soon"],
     "ServerPongTimeoutSecs"),
    ({}, ["--strict-config", "--set", "NoSuchThing=1"], "NoSuchThing"),
    ({"TYPHA_CLIENTCN": "felix"}, ["--datastore", "memory"], "TYPHA_SERVERCERTFILE"),
])
def test_config_errors_exit_2_and_name_the_variable(env, args, needle) -> None:
    proc = run_cli("serve", *args, env=env)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr


def test_bad_seed_file_exits_2(tmp_path) -> None:
    seed = tmp_path / "bad.yaml"
    seed.write_text("apiVersion: v1\nkind: Pod\nmetadata: {}\n")
    proc = run_cli("serve", "--seed", str(seed))
    assert proc.returncode == 2, proc.stderr
    assert "bad.yaml" in proc.stderr and "metadata.name" in proc.stderr


def test_version() -> None:
    proc = run_cli("--version")
    assert proc.returncode == 0 and "trio-typha" in proc.stdout
