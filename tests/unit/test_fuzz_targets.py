"""The atheris fuzz targets: their seeds run clean in-process, and a short coverage-guided
run of every target (CI's budget; ``python -m tests.fuzz all --seconds 600`` is the long one)
finds nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzz import __main__ as runner
from tests.fuzz import targets

ROOT = Path(__file__).resolve().parents[2]
CI_SECONDS = 2


def test_runner_lists_every_target():
    assert set(runner.TARGETS) == set(targets.TARGETS)


@pytest.mark.parametrize("name", list(targets.TARGETS))
def test_seeds_and_their_truncations_run_clean(name):
    fn = targets.TARGETS[name]
    for seed in targets.seeds(name):
        for end in range(0, len(seed) + 1, max(1, len(seed) // 40)):
            fn(seed[:end])


def test_short_coverage_guided_run_of_every_target(tmp_path):
    done = subprocess.run([sys.executable, "-m", "tests.fuzz", "all", "--seconds",
                           str(CI_SECONDS)], cwd=ROOT, capture_output=True, text=True,
                          timeout=30 * len(targets.TARGETS))  # each child instruments imports
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert f"all {len(targets.TARGETS)} targets ran clean" in done.stdout
    # Coverage feedback works (instrumented imports), so the run is not blind.
    assert "WARNING: no interesting inputs" not in done.stderr
