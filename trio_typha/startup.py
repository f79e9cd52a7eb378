"""Start-up failures an operator can fix: one line each, a distinct exit code, no traceback.

Each says what failed, which setting is involved and what to do.  The CLI prints the line
and exits with the code; everything else that goes wrong is a bug and keeps its traceback.
"""

from __future__ import annotations

__sans_io__ = True

import errno
from collections.abc import Iterator
from socket import gaierror


class StartupError(Exception):
    """The daemon cannot start for a reason named in the message."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ListenPortInUse(StartupError):
    exit_code = 4


class HttpPortInUse(StartupError):
    exit_code = 5


class KubernetesConfigMissing(StartupError):
    exit_code = 6


class DatastoreUnreachable(StartupError):
    exit_code = 7


#: Exit codes: 2 configuration error (cli), 3 TLS files (cli), and the above.
EXIT_CONFIG = 2
EXIT_TLS_FILES = 3


def port_in_use(what: str, setting: str, host: str, port: int, exc: OSError,
                kind: type[StartupError], host_setting: str) -> StartupError:
    """The line for a listen socket that could not be opened, naming the setting at fault:
    the host's when the address does not resolve or is not on this machine, else the
    port's."""
    where = f"{host or '*'}:{port}"
    head = f"cannot listen on {where} for {what}"
    if isinstance(exc, gaierror):
        return kind(f"{head} ({host_setting}): cannot resolve host {host!r}: "
                    f"{exc.strerror or exc}; set {host_setting} to an address of this machine")
    if exc.errno in _HOST_ERRNOS:
        return kind(f"{head} ({host_setting}): {exc.strerror or exc}; {host!r} is not an "
                    f"address of this machine, set {host_setting} to one")
    return kind(f"{head} ({setting}): {exc.strerror or exc}; "
                f"stop whatever holds the port or set {setting} to a free one")


#: Errors that say the address cannot be bound at all, whatever the port.
_HOST_ERRNOS = frozenset({errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT})


def leaves(exc: BaseException) -> Iterator[BaseException]:
    """The exceptions inside (nested) exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from leaves(inner)
    else:
        yield exc


def first_startup_error(exc: BaseException) -> StartupError | None:
    return next((e for e in leaves(exc) if isinstance(e, StartupError)), None)
