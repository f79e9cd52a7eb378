"""syncer.gcpause: holders are counted; collection resumes with the last one, and only if
it was on when the first one came.  The collector is the interpreter's own."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from trio_typha.syncer.gcpause import GCPauses


@pytest.fixture
def pauses() -> Iterator[GCPauses]:
    was = gc.isenabled()
    pauses = GCPauses(gc)
    yield pauses
    assert pauses.holders == 0
    (gc.enable if was else gc.disable)()


def test_last_release_resumes_collection(pauses: GCPauses) -> None:
    gc.enable()
    a, b = pauses.pause(), pauses.pause()
    a.hold()
    b.hold()
    assert not gc.isenabled() and pauses.holders == 2
    a.release()
    assert not gc.isenabled()
    a.release()  # idempotent: still b's pause
    assert not gc.isenabled() and pauses.holders == 1
    b.release()
    assert gc.isenabled() and pauses.holders == 0


def test_hold_is_idempotent(pauses: GCPauses) -> None:
    gc.enable()
    a = pauses.pause()
    a.hold()
    a.hold()
    assert pauses.holders == 1
    a.release()
    assert gc.isenabled()


def test_collection_switched_off_elsewhere_stays_off(pauses: GCPauses) -> None:
    gc.disable()
    a = pauses.pause()
    a.hold()
    a.release()
    assert not gc.isenabled()


def test_two_owners_count_their_own_holders() -> None:
    """Each daemon owns its pauses: one's holders are not another's."""
    was = gc.isenabled()
    gc.enable()
    mine, theirs = GCPauses(gc), GCPauses(gc)
    held = mine.pause()
    held.hold()
    assert (mine.holders, theirs.holders) == (1, 0)
    held.release()
    assert gc.isenabled()
    (gc.enable if was else gc.disable)()
