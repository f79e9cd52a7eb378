"""A new upstream's snapshot taken as a relist (relay/resync.py, pure): applying the diff to
what the relay held gives exactly the snapshot, unchanged keys are not sent, and keys the
snapshot lacks are deleted (no phantom keys)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from trio_typha.model.kv import SerializedUpdate, UpdateType
from trio_typha.relay.resync import relist_diff

keys = st.text(alphabet="abcdef/", min_size=1, max_size=6)
values = st.binary(min_size=1, max_size=4)
states = st.dictionaries(keys, values, max_size=30)


def snapshot_of(state: dict[str, bytes]) -> list[SerializedUpdate]:
    return [SerializedUpdate(k, v, revision="1") for k, v in sorted(state.items())]


@given(states, states)
def test_the_diff_turns_what_was_held_into_the_snapshot(held, new):
    diff = relist_diff(held, snapshot_of(new))
    state = dict(held)
    for u in diff:
        if u.deleted:
            state.pop(u.key, None)
        else:
            state[u.key] = u.value
    assert state == new
    # Nothing the relay's clients already have is sent again.
    assert all(held.get(u.key) != u.value for u in diff if not u.deleted)
    assert len(diff) == len({u.key for u in diff})
    kinds = {u.key: u.update_type for u in diff}
    for key, kind in kinds.items():
        expected = (UpdateType.DELETED if key not in new else
                    UpdateType.NEW if key not in held else UpdateType.UPDATED)
        assert kind is expected


def test_deletions_come_after_the_new_state():
    diff = relist_diff({"/a": b"1", "/z": b"2"}, snapshot_of({"/b": b"1"}))
    assert [(u.key, u.update_type) for u in diff] == [
        ("/b", UpdateType.NEW), ("/a", UpdateType.DELETED), ("/z", UpdateType.DELETED)]


def test_a_failover_between_upstreams_in_the_same_state_sends_nothing():
    state = {"/a": b"1", "/b": b"2"}
    assert relist_diff(state, snapshot_of(state)) == []
