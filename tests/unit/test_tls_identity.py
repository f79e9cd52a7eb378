"""Typha's client identity rule: CN or URI SAN, either enough when both are configured."""

from __future__ import annotations

import pytest

from trio_typha.tls.server import check_peer_identity

CERT = {"subject": ((("commonName", "typha-client"),),),
        "subjectAltName": (("URI", "spiffe://cluster/ns/calico/sa/node"), ("DNS", "x"))}


@pytest.mark.parametrize(("cn", "uri", "ok"), [
    ("", "", True),
    ("typha-client", "", True),
    ("other", "", False),
    ("", "spiffe://cluster/ns/calico/sa/node", True),
    ("", "spiffe://other", False),
    ("other", "spiffe://cluster/ns/calico/sa/node", True),
    ("typha-client", "spiffe://other", True),
    ("other", "spiffe://other", False),
])
def test_cn_and_uri_san_rules(cn, uri, ok) -> None:
    reason = check_peer_identity(CERT, cn, uri)
    assert (reason == "") is ok
    if not ok:
        assert "wanted" in reason


def test_missing_certificate() -> None:
    assert check_peer_identity(None, "typha-client", "") == "no client certificate"
