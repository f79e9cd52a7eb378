"""The model's IPv6 text equals Go's ``net.IP.String`` (the Go tool built from Go's
standard library), on 200,000 random addresses rich in zero runs, IPv4-mapped ones included."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.unit.model.test_golang_ip import random_addresses
from trio_typha.model.golang import format_ip

pytestmark = pytest.mark.go

GOTOOLS = Path(__file__).resolve().parents[1] / "gotools"


def test_format_ip_is_go_net_ip_string() -> None:
    built = subprocess.run(["bash", str(GOTOOLS / "build.sh")], check=True, capture_output=True,
                           text=True, timeout=600)
    gobtool = built.stdout.strip().splitlines()[-1]
    addresses = random_addresses(200_000, seed=9)
    done = subprocess.run([gobtool, "ipstring"], input="\n".join(b.hex() for b in addresses),
                          capture_output=True, text=True, check=True, timeout=120)
    go = done.stdout.splitlines()
    assert len(go) == len(addresses)
    mismatches = [(b.hex(), g) for b, g in zip(addresses, go, strict=True) if format_ip(b) != g]
    assert mismatches == []
