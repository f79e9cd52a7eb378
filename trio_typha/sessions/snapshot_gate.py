"""The server's snapshot turns for trio tasks (the shell around :mod:`.snapshot_turns`).

A session asks for its turn once its hello is read and its first message written
(:meth:`SnapshotGate.turn`), waits for it (pinging meanwhile if its protocol needs that),
sends its snapshot, and gives the turn back by leaving the ``with`` block, whatever ends
it: a session that ends while waiting leaves the queue the same way.
"""

from __future__ import annotations

import trio

from .snapshot_turns import SnapshotTurns


class Turn:
    """One session's place in the snapshot turns; a context manager that gives it back."""

    def __init__(self, gate: SnapshotGate) -> None:
        self._gate = gate
        self.granted = trio.Event()

    async def wait(self) -> None:
        """Until this session's turn has started."""
        await self.granted.wait()

    async def wait_until(self, deadline: float) -> bool:
        """Until the turn starts or ``deadline`` passes; whether it has started."""
        with trio.move_on_at(deadline):
            await self.granted.wait()
        return self.granted.is_set()

    def release(self) -> None:
        """Done with the turn (or no longer waiting for it); idempotent."""
        self._gate._finish(self)

    def __enter__(self) -> Turn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class SnapshotGate:
    """At most ``limit`` snapshot sends at once over every connection of the process
    (0: no limit); the rest wait in arrival order."""

    def __init__(self, limit: int) -> None:
        self.turns = SnapshotTurns(limit)

    def turn(self) -> Turn:
        """Ask for a turn now (its ``granted`` is set at once if one is free)."""
        turn = Turn(self)
        if self.turns.request(turn, trio.current_time()):
            turn.granted.set()
        return turn

    def _finish(self, turn: Turn) -> None:
        for started in self.turns.finish(turn, trio.current_time()):
            assert isinstance(started, Turn)
            started.granted.set()
