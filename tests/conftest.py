"""Shared by the whole suite."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest

# ServerWorkers' default is one process per usable CPU.  Tests start servers in this
# process with ServerWorkers=1 in their config helpers; servers they start as
# subprocesses (``trio-typha serve``) inherit this unless a test sets it itself.  Only the
# tests about workers (tests/integration/test_server_workers.py) start workers.
os.environ.setdefault("TYPHA_SERVERWORKERS", "1")


@pytest.fixture(autouse=True)
def _restore_root_logging() -> Iterator[None]:
    """Undo what a test left on the root logger (``setup_logging``, which the CLI's
    ``main`` calls, or ``basicConfig``): a handler on pytest's captured stderr outlives the
    capture, and every later log line then prints a "Logging error" traceback (slow
    enough to upset timing).  pytest's own handlers come and go with its phases."""
    root = logging.getLogger()
    before, level = set(root.handlers), root.level
    yield
    for h in list(root.handlers):
        if h not in before and type(h).__module__ != "_pytest.logging":
            root.removeHandler(h)
            h.close()  # closes files and sockets it opened; a StreamHandler's stream stays
    root.setLevel(level)
