"""CI's chaos run: 20 seeded faults (every kind, most of them more than once) against a real
etcd, one replica and a fleet on both protocols; every fault survived, nothing lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.run import FAULTS, print_report, run

pytestmark = pytest.mark.etcd


async def test_twenty_faults_are_survived_with_no_key_lost(tmp_path: Path) -> None:
    report = await run(20, seed=1, agents_per_protocol=3, workdir=tmp_path)
    print_report(report)
    assert report.faults_injected == 20
    assert set(report.by_kind) == set(FAULTS)
    assert report.faults_survived == 20, report.failures
    assert report.keys_checked > 0
    assert (report.keys_lost, report.phantom_keys, report.differing_values) == (0, 0, 0)
    # The canaries were served while the adversarial peers ran.
    assert report.canary_rate_during_attacks > 0
