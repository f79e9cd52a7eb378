"""Start-up failures through the real CLI: one named line, a distinct exit code, no traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

ROOT = Path(__file__).resolve().parents[2]


def serve(*args: str, env: dict[str, str] | None = None, home: Path | None = None
          ) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("TYPHA_", "KUBERNETES_", "KUBECONFIG", "CALICO_", "TLS_"))}
    base["TYPHA_SERVERWORKERS"] = "1"  # one process (tests/conftest.py)
    if home is not None:
        base["HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "trio_typha", "serve", "-c", os.devnull, *args],
        env={**base, **(env or {})}, cwd=ROOT, capture_output=True, text=True, timeout=60)


def the_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("trio-typha: ")]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


MEMORY = ("--datastore", "memory", "--demo-cluster", "tiny", "--host", "127.0.0.1")


def test_sync_port_in_use(busy_port: int) -> None:
    result = serve(*MEMORY, "--port", str(busy_port))
    assert result.returncode == 4
    line = the_line(result)
    assert f"cannot listen on 127.0.0.1:{busy_port} for the sync server (TYPHA_SERVERPORT)" \
        in line and "Address already in use" in line


def test_health_port_in_use(busy_port: int) -> None:
    result = serve(*MEMORY, "--port", "0", "--health", "--health-host", "127.0.0.1",
                   "--health-port", str(busy_port))
    assert result.returncode == 5
    assert "for the health endpoint (TYPHA_HEALTHPORT)" in the_line(result)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("startup-pki")
    ca = trustme.CA()
    one, two = ca.issue_cert("typha-server"), ca.issue_cert("other")
    paths = {"ca": d / "ca.pem", "cert": d / "cert.pem", "other_key": d / "other.key",
             "garbage": d / "garbage.pem"}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    one.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    two.private_key_pem.write_to_path(str(paths["other_key"]))
    paths["garbage"].write_text("not a certificate\n")
    return paths


@pytest.mark.parametrize(("cert", "key", "expected"), [
    ("cert", "other_key", "the key does not belong to the certificate"),
    ("garbage", "other_key", "cannot load the certificate and key"),
])
def test_unusable_certificate_or_key(certs: dict[str, Path], cert: str, key: str,
                                     expected: str) -> None:
    result = serve(*MEMORY, "--port", "0", env={
        "TYPHA_SERVERCERTFILE": str(certs[cert]), "TYPHA_SERVERKEYFILE": str(certs[key]),
        "TYPHA_CAFILE": str(certs["ca"]), "TYPHA_CLIENTCN": "typha-client"})
    assert result.returncode == 3
    line = the_line(result)
    assert "TYPHA_SERVERCERTFILE=" in line and expected in line


def test_no_kubernetes_configuration(tmp_path: Path) -> None:
    result = serve("--port", "0", env={"TYPHA_DATASTORETYPE": "kubernetes",
                                       "CALICO_API_GROUP": "crd.projectcalico.org/v1"},
                   home=tmp_path)
    assert result.returncode == 6
    line = the_line(result)
    assert "no usable Kubernetes configuration for TYPHA_DATASTORETYPE=kubernetes" in line
    assert "set KUBECONFIG" in line


def test_rebalancing_without_kubernetes_configuration(tmp_path: Path) -> None:
    result = serve(*MEMORY, "--port", "0", env={"TYPHA_CONNECTIONREBALANCINGMODE": "kubernetes"},
                   home=tmp_path)
    assert result.returncode == 6
    assert "TYPHA_CONNECTIONREBALANCINGMODE=kubernetes" in the_line(result)


def test_unreachable_etcd_at_start() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    result = serve("--port", "0", env={"TYPHA_DATASTORETYPE": "etcdv3",
                                       "TYPHA_ETCDENDPOINTS": f"http://127.0.0.1:{dead}"})
    assert result.returncode == 7
    line = the_line(result)
    assert f"cannot reach etcd at http://127.0.0.1:{dead}/" in line
    assert "TYPHA_ETCDENDPOINTS" in line


def test_invalid_value_is_still_a_configuration_error() -> None:
    result = serve(*MEMORY, "--port", "0", env={"TYPHA_SERVERPINGINTERVALSECS": "soon"})
    assert result.returncode == 2
    assert "TYPHA_SERVERPINGINTERVALSECS" in the_line(result)


# 192.0.2.0/24 is TEST-NET-1 (RFC 5737): never an address of this machine.
@pytest.mark.parametrize(("host", "why"), [("no-such-host.invalid", "cannot resolve host"),
                                           ("192.0.2.1", "not an address of this machine")])
def test_a_bad_sync_host_names_the_host_setting_not_the_port(host: str, why: str) -> None:
    result = serve("--datastore", "memory", "--demo-cluster", "tiny", "--host", host,
                   "--port", "0")
    assert result.returncode == 4
    line = the_line(result)
    assert "(TYPHA_SERVERHOST)" in line and host in line and why in line
    assert "TYPHA_SERVERPORT" not in line and "free one" not in line


def test_health_host_not_on_this_machine_names_the_host_setting() -> None:
    result = serve(*MEMORY, "--port", "0", "--health", "--health-host", "192.0.2.1",
                   "--health-port", "0")
    assert result.returncode == 5
    line = the_line(result)
    assert "for the health endpoint (TYPHA_HEALTHHOST)" in line
    assert "TYPHA_HEALTHPORT" not in line
