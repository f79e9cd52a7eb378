"""Logging in Typha's line format: ``time [LEVEL][pid] module line: message``.

To stderr at LogSeverityScreen, to LogFilePath at LogSeverityFile, and to the local syslog
(tag ``calico-typha``, without time and pid, as Typha) at LogSeveritySys.  Writes are
synchronous, so nothing is ever dropped (Typha drops when its 100-entry queue is full
unless DebugDisableLogDropping).
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import socket
import sys

_LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING,
           "ERROR": logging.ERROR, "CRITICAL": logging.CRITICAL}


class TyphaFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__(fmt="%(asctime)s.%(msecs)03d [%(levelname)s][%(process)d] "
                             "%(module)s.py %(lineno)d: %(message)s",
                         datefmt="%Y-%m-%d %H:%M:%S")


class SyslogFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__(fmt="calico-typha[%(process)d]: [%(levelname)s] %(module)s.py "
                             "%(lineno)d: %(message)s")


SYSLOG_ADDRESS = "/dev/log"


# The destinations we open have types of their own, so the next setup knows them from the
# root logger's handlers alone and closes them, never another's handler.
class _LogFile(logging.FileHandler):
    pass


class _Syslog(logging.handlers.SysLogHandler):
    pass


def _add_ours(root: logging.Logger, handler: logging.Handler, formatter: logging.Formatter,
              level: str) -> int:
    """Attach a destination we opened (closed by the next setup); returns its level."""
    handler.setFormatter(formatter)
    handler.setLevel(_LEVELS.get(level.upper(), logging.INFO))
    root.addHandler(handler)
    return handler.level


def setup_logging(level: str = "INFO", *, file_path: str = "", file_level: str = "INFO",
                  sys_level: str = "") -> None:
    """Configure the root logger once; levels are Typha severity names ("" turns the file
    or syslog destination off)."""
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
        if isinstance(h, (_LogFile, _Syslog)):
            h.close()
    screen = logging.StreamHandler(sys.stderr)
    screen.setFormatter(TyphaFormatter())
    screen.setLevel(_LEVELS.get(level.upper(), logging.INFO))
    root.addHandler(screen)
    levels = [screen.level]
    problems = []
    if file_path:
        try:
            os.makedirs(os.path.dirname(file_path) or ".", exist_ok=True)
            to_file = _LogFile(file_path, encoding="utf-8")
        except OSError as exc:
            problems.append(f"Failed to open log file {file_path} (LogFilePath): {exc}")
        else:
            levels.append(_add_ours(root, to_file, TyphaFormatter(), file_level))
    if sys_level:
        try:
            # SysLogHandler swallows a failed connect; find out first, as Typha reports it.
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
                probe.connect(SYSLOG_ADDRESS)
            to_sys = _Syslog(address=SYSLOG_ADDRESS)
        except OSError as exc:
            problems.append(f"Failed to connect to syslog ({exc}). To prevent this error, "
                            "either set config parameter LogSeveritySys=none or configure a "
                            "local syslog service.")
        else:
            levels.append(_add_ours(root, to_sys, SyslogFormatter(), sys_level))
    root.setLevel(min(levels))
    for problem in problems:
        logging.getLogger(__name__).error("%s", problem)
    # Chatty libraries stay at WARNING unless we are debugging.
    if root.level > logging.DEBUG:
        for noisy in ("hpack", "h2", "httpx", "httpcore"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
