"""Relay mode's parameters: addresses parsed, and every mistake named by its variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from trio_typha.config import ConfigError
from trio_typha.config_sources import load_config


def relay(**env: str):
    return load_config({"TYPHA_DATASTORETYPE": "typha", **env}, config_file=None)


def test_addresses_are_parsed_with_typhas_port_by_default() -> None:
    cfg = relay(TYPHA_UPSTREAMTYPHAADDRS="10.0.0.1:6000, typha-a ,[fd00::1]:5473,")
    assert cfg.upstream_typha_addrs == ("10.0.0.1:6000", "typha-a:5473", "[fd00::1]:5473")
    assert cfg.upstream_typha_protocol == "feed"


@pytest.mark.parametrize(("env", "needle"), [
    ({"TYPHA_UPSTREAMTYPHAADDRS": "a:1,b:99999"}, "TYPHA_UPSTREAMTYPHAADDRS: invalid value"),
    ({"TYPHA_UPSTREAMTYPHAADDRS": "http://a:1"}, "TYPHA_UPSTREAMTYPHAADDRS: invalid value"),
    ({"TYPHA_UPSTREAMTYPHAPROTOCOL": "grpc"}, "TYPHA_UPSTREAMTYPHAPROTOCOL"),
    ({"TYPHA_WATCHSTALLTIMEOUTSECS": "1"}, "TYPHA_WATCHSTALLTIMEOUTSECS: relay mode"),
    ({"TYPHA_UPSTREAMTYPHACN": "typha"}, "TYPHA_UPSTREAMTYPHACAFILE"),
])
def test_mistakes_name_the_variable(env: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        relay(**env)


def test_tls_needs_the_pair_and_an_identity(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    with pytest.raises(ConfigError, match="TYPHA_UPSTREAMTYPHAKEYFILE"):
        relay(TYPHA_UPSTREAMTYPHACAFILE=str(ca), TYPHA_UPSTREAMTYPHACERTFILE=str(ca),
              TYPHA_UPSTREAMTYPHACN="typha")
    with pytest.raises(ConfigError, match="TYPHA_UPSTREAMTYPHACN/TYPHA_UPSTREAMTYPHAURISAN"):
        relay(TYPHA_UPSTREAMTYPHACAFILE=str(ca))
