"""``trio-typha client`` (the real CLI, as a subprocess) when TLS fails on the *server's*
side: for each reason the server refuses our certificate, and for the wrong kind of port,
both protocols print one line naming the reason and exit with status 3, the status the
README documents for a TLS failure.  A good ``--once`` run ends with close_notify, so the
server does not log a truncated connection."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme
from cryptography.x509.oid import ExtendedKeyUsageOID
from test_tls_diagnosis import PAST, daemon, leaf, wait_counted, write_server_files

PROTOCOLS = ("typha", "grpc")


@pytest.fixture(scope="module")
def pki() -> dict[str, Any]:
    ca, other = trustme.CA(organization_name="Typha CA"), trustme.CA(
        organization_name="Rogue CA")
    return {"ca": ca, "other": other,
            "server": ca.issue_cert("typha-server", common_name="typha-server"),
            "felix": ca.issue_cert("typha-client", common_name="typha-client")}


def server_files(pki: dict[str, Any], tmp: Path) -> dict[str, Path]:
    tmp.mkdir(parents=True, exist_ok=True)
    return write_server_files(pki, tmp)


def write_client_files(tmp: Path, name: str, ca: trustme.CA, cert: Any = None) -> list[str]:
    """The CLI's TLS flags for a client trusting ``ca`` and presenting ``cert`` (if any)."""
    tmp.mkdir(parents=True, exist_ok=True)
    ca_path = tmp / f"{name}-ca.crt"
    ca.cert_pem.write_to_path(str(ca_path))
    flags = ["--ca-file", str(ca_path)]
    if cert is not None:
        cert.cert_chain_pems[0].write_to_path(str(tmp / f"{name}.crt"))
        cert.private_key_pem.write_to_path(str(tmp / f"{name}.key"))
        flags += ["--cert-file", str(tmp / f"{name}.crt"), "--key-file", str(tmp / f"{name}.key")]
    return flags


async def run_cli(port: int, protocol: str, flags: list[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of one ``trio-typha client --once``."""
    with trio.fail_after(60):
        proc = await trio.run_process(
            [sys.executable, "-m", "trio_typha", "client", "--addr", f"127.0.0.1:{port}",
             "--protocol", protocol, "--once", "--hostname", "cli-test", *flags],
            capture_stdout=True, capture_stderr=True, check=False)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


async def run_all(port: int, runs: dict[tuple[str, str], list[str]]
                  ) -> dict[tuple[str, str], tuple[int, str, str]]:
    results: dict[tuple[str, str], tuple[int, str, str]] = {}

    async def one(key: tuple[str, str], flags: list[str]) -> None:
        results[key] = await run_cli(port, key[1], flags)

    async with trio.open_nursery() as nursery:
        for key, flags in runs.items():
            nursery.start_soon(one, key, flags)
    return results


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr  # one clear line, no traceback
    return lines[0]


async def test_server_refusing_our_certificate_is_named_and_exits_3(
        pki: dict[str, Any], tmp_path: Path) -> None:
    ca: trustme.CA = pki["ca"]
    certs = {
        # reason: (certificate presented, what the client must say)
        "unknown_ca": (pki["other"].issue_cert("typha-client", common_name="typha-client"),
                       "server refused our certificate: TLS alert unknown_ca"),
        "expired": (ca.issue_cert("typha-client", common_name="typha-client", not_after=PAST),
                    "server refused our certificate: TLS alert certificate_expired"),
        "wrong_key_usage": (leaf(ca, "typha-client", ExtendedKeyUsageOID.SERVER_AUTH),
                            "server refused our certificate: TLS alert unsupported_certificate"),
        "no_client_cert": (None, "server refused our certificate: TLS alert "
                                 "certificate_required"),
        # The server checks CN / URI SAN after the handshake and can only close.
        "identity_mismatch": (ca.issue_cert("intruder", common_name="someone-else"),
                              "server refused our certificate: it closed the connection "
                              "after the TLS handshake"),
    }
    async with daemon(server_files(pki, tmp_path / "server")) as d:
        runs = {(reason, protocol): write_client_files(tmp_path / "client", reason, ca, cert)
                for reason, (cert, _) in certs.items() for protocol in PROTOCOLS}
        results = await run_all(d.ports["server"], runs)
        for reason in certs:
            await wait_counted(d, reason, len(PROTOCOLS))
    for (reason, protocol), (status, _, stderr) in results.items():
        line = one_line(stderr)
        assert status == 3, (reason, protocol, stderr)
        assert certs[reason][1] in line, (reason, protocol, line)
        assert line.startswith("trio-typha client: 127.0.0.1:"), line
        assert f"TLS {reason}: " in line, line


async def test_wrong_kind_of_port_is_named_and_exits_3(pki: dict[str, Any],
                                                      tmp_path: Path) -> None:
    flags = write_client_files(tmp_path / "client", "felix", pki["ca"], pki["felix"])
    async with daemon(server_files(pki, tmp_path / "server")) as d:
        plain = await run_all(d.ports["server"], {("plain", p): [] for p in PROTOCOLS})
        await wait_counted(d, "plaintext_to_tls_port", len(PROTOCOLS))
    async with daemon(None) as d:
        tls = await run_all(d.ports["server"], {("tls", p): flags for p in PROTOCOLS})
        await wait_counted(d, "tls_to_plaintext_port", len(PROTOCOLS))
    for (_, protocol), (status, _, stderr) in plain.items():
        line = one_line(stderr)
        assert status == 3, (protocol, stderr)
        assert "TLS plaintext_to_tls_port: the server answered our plaintext with a TLS " \
               "alert: its port serves TLS" in line, line
    for (_, protocol), (status, _, stderr) in tls.items():
        line = one_line(stderr)
        assert status == 3, (protocol, stderr)
        assert "TLS tls_to_plaintext_port: the server closed the connection without " \
               "answering our TLS ClientHello" in line, line


async def test_once_over_mtls_ends_cleanly_on_both_sides(
        pki: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    flags = write_client_files(tmp_path / "client", "felix", pki["ca"], pki["felix"])
    flags += ["--server-cn", "typha-server"]
    async with daemon(server_files(pki, tmp_path / "server")) as d:
        results = await run_all(d.ports["server"], {("ok", p): flags for p in PROTOCOLS})
        with trio.fail_after(10):
            while d.ctx.sessions:  # noqa: ASYNC110 - until the server has seen both ends
                await trio.sleep(0.05)
    for (_, protocol), (status, stdout, stderr) in results.items():
        assert status == 0, (protocol, stderr)
        assert "in sync: syncer=felix" in stdout
    noisy = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO
             and ("UNEXPECTED_EOF" in r.getMessage() or "failed" in r.getMessage())]
    assert not noisy, noisy
