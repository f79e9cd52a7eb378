"""What counts as an internal error of the server, in-process and in a daemon's log.

The per-connection bulkheads keep one crashing handler from taking the server down and log
it at ERROR with its traceback; tests/conftest.py fails any test during which that happens
(unless it is marked ``internal_error_expected``), and tests that keep a daemon
subprocess's log check it with :func:`internal_errors`.
"""

from __future__ import annotations

import logging


class InternalErrors(logging.Handler):
    """Keeps every record the server logs at ERROR or above with a traceback attached: what
    the per-connection bulkheads log when a handler crashes (``protocols/gob/shell.py``'s
    "Internal error serving Typha client", ``protocols/grpc/shell.py``'s "gRPC connection
    from ... failed" and "gRPC stream ... handler failed"), and whatever else catches a bug
    to keep going."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.name.startswith("trio_typha"):
            self.records.append(record)


def internal_errors(log_text: str) -> list[str]:
    """The internal errors in a daemon subprocess's log (``logs.TyphaFormatter`` lines):
    each ERROR line followed by a traceback."""
    lines = log_text.splitlines()
    return [line for line, after in zip(lines, lines[1:], strict=False)
            if "[ERROR]" in line and after.startswith("Traceback")]
