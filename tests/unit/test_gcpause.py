"""syncer.gcpause: holders are counted; collection resumes with the last one, and only if
it was on when the first one came."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from trio_typha.syncer.gcpause import GCPause, holders


@pytest.fixture(autouse=True)
def _collector_restored() -> Iterator[None]:
    was = gc.isenabled()
    yield
    assert holders() == 0
    (gc.enable if was else gc.disable)()


def test_last_release_resumes_collection() -> None:
    gc.enable()
    a, b = GCPause(), GCPause()
    a.hold()
    b.hold()
    assert not gc.isenabled() and holders() == 2
    a.release()
    assert not gc.isenabled()
    a.release()  # idempotent: still b's pause
    assert not gc.isenabled() and holders() == 1
    b.release()
    assert gc.isenabled() and holders() == 0


def test_hold_is_idempotent() -> None:
    gc.enable()
    a = GCPause()
    a.hold()
    a.hold()
    assert holders() == 1
    a.release()
    assert gc.isenabled()


def test_collection_switched_off_elsewhere_stays_off() -> None:
    gc.disable()
    a = GCPause()
    a.hold()
    a.release()
    assert not gc.isenabled()

