"""Shared by the whole suite."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest

from tests.internal_errors import InternalErrors

# ServerWorkers' default is one process per usable CPU.  Tests start servers in this
# process with ServerWorkers=1 in their config helpers; servers they start as
# subprocesses (``trio-typha serve``) inherit this unless a test sets it itself.  Only the
# tests about workers (tests/integration/test_server_workers.py) start workers.
os.environ.setdefault("TYPHA_SERVERWORKERS", "1")


@pytest.fixture(autouse=True)
def _fail_on_internal_errors(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test fails if the server logged an internal error while it ran (the bulkheads keep
    a crashing connection from taking the server down, which would otherwise hide the bug
    from every test that only looks at other clients), unless it is marked
    ``@pytest.mark.internal_error_expected(reason=...)``."""
    handler = InternalErrors()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
    expected = request.node.get_closest_marker("internal_error_expected")
    if expected is not None:
        assert expected.kwargs.get("reason"), "internal_error_expected needs a reason"
        assert handler.records, "marked internal_error_expected but none was logged"
    elif handler.records:
        formatter = logging.Formatter("%(name)s: %(message)s")
        pytest.fail("the server logged internal errors:\n"
                    + "\n".join(formatter.format(r) for r in handler.records), pytrace=False)


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
