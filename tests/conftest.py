"""Shared by the whole suite."""

from __future__ import annotations

import os

# ServerWorkers' default is one process per usable CPU.  Tests start servers in this
# process with ServerWorkers=1 in their config helpers; servers they start as
# subprocesses (``trio-typha serve``) inherit this unless a test sets it itself.  Only the
# tests about workers (tests/integration/test_server_workers.py) start workers.
os.environ.setdefault("TYPHA_SERVERWORKERS", "1")
