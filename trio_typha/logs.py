"""Logging in Typha's line format, so pipelines that parse Typha's logs parse ours.

A line is ``2006-01-02 15:04:05.000 [LEVEL][pid] file.py 123: message k1="v" k2=5``: local
time truncated to milliseconds, the level in capitals, the process id, the source file's
base name and line, the message, then the record's fields sorted by key, strings quoted
with Go's escapes and other values bare (the layout of libcalico-go/lib/logutils/logformat
``Formatter``).  Fields come from ``extra=fields(key=value, ...)``.

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
import time

from .gofmt import FIELDS, fields, format_fields

__all__ = ["fields", "setup_logging"]

_LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING,
           "ERROR": logging.ERROR, "CRITICAL": logging.CRITICAL}

#: logrus's names for the levels we use (its WarnLevel prints as "warning").
_LEVEL_NAMES = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARNING",
                logging.ERROR: "ERROR", logging.CRITICAL: "FATAL"}

class TyphaFormatter(logging.Formatter):
    """Typha's screen and file line, in local time as Typha's (UTC when ``utc``)."""

    utc = False

    def timestamp(self, created: float) -> str:
        micros = round(created * 1_000_000)
        seconds, rest = divmod(micros, 1_000_000)
        when = time.gmtime(seconds) if self.utc else time.localtime(seconds)
        return time.strftime("%Y-%m-%d %H:%M:%S", when) + f".{rest // 1000:03d}"

    def head(self, record: logging.LogRecord) -> str:
        return (f"{self.timestamp(record.created)} "
                f"[{_level(record)}][{record.process}] ")

    def format(self, record: logging.LogRecord) -> str:
        line = (f"{self.head(record)}{record.filename} {record.lineno or '<nil>'}: "
                f"{record.getMessage()}{format_fields(getattr(record, FIELDS, {}))}")
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line += "\n" + record.exc_text
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


def _level(record: logging.LogRecord) -> str:
    return _LEVEL_NAMES.get(record.levelno, record.levelname.upper())


class SyslogFormatter(TyphaFormatter):
    """Typha's syslog line: the tag and pid, then the level, file, line, message and
    fields (syslog stamps the time)."""

    def head(self, record: logging.LogRecord) -> str:
        return f"calico-typha[{record.process}]: {_level(record)} "


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
