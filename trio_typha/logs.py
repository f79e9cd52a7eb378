"""Logging to stderr in Typha's line format: ``time [LEVEL][pid] module line: message``."""

from __future__ import annotations

import logging
import os
import sys

_LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING,
           "ERROR": logging.ERROR, "CRITICAL": logging.CRITICAL}


class TyphaFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__(fmt="%(asctime)s.%(msecs)03d [%(levelname)s][%(process)d] "
                             "%(module)s.py %(lineno)d: %(message)s",
                         datefmt="%Y-%m-%d %H:%M:%S")


def setup_logging(level: str = "INFO") -> None:
    """Configure the root logger once; ``level`` is a Typha severity name."""
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TyphaFormatter())
    root.addHandler(handler)
    root.setLevel(_LEVELS.get(level.upper(), logging.INFO))
    # Chatty libraries stay at WARNING unless we are debugging.
    if root.level > logging.DEBUG:
        for noisy in ("hpack", "h2", "httpx", "httpcore"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


def early_level() -> str:
    env = os.environ
    return env.get("TYPHA_EARLYLOGSEVERITYSCREEN") or env.get("TYPHA_LOGSEVERITYSCREEN") or "INFO"
