"""CI's chaos run: 20 seeded faults, half against a real etcd and half against the test bed's
Kubernetes API server, each with one replica and a fleet on both protocols; every fault is
survived and the invariant checker finds nothing lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.run import FAULTS, print_report, run_both

pytestmark = pytest.mark.etcd


async def test_twenty_faults_are_survived_with_no_key_lost(tmp_path: Path) -> None:
    report = await run_both(20, seed=1, agents_per_protocol=3, workdir=tmp_path)
    print_report(report)
    assert report.faults_injected == 20
    kinds = {k.split(":", 1)[1] for k in report.by_kind}
    assert set(FAULTS) <= kinds  # the common faults ran against both datastores
    assert {"etcd_sigkill", "cut_and_compact", "api_410", "api_429", "api_500"} <= kinds
    assert report.faults_survived == 20, report.failures
    assert report.keys_checked > 0
    assert (report.keys_lost, report.phantom_keys, report.differing_values) == (0, 0, 0)
    # The canaries were served while the adversarial peers ran.
    assert report.canary_rate_during_attacks > 0
