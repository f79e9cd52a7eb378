"""Start-up failures an operator can fix: one line each, a distinct exit code, no traceback.

Each says what failed, which setting is involved and what to do.  The CLI prints the line
and exits with the code; everything else that goes wrong is a bug and keeps its traceback.
"""

from __future__ import annotations

__sans_io__ = True

from collections.abc import Iterator


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
                kind: type[StartupError]) -> StartupError:
    where = f"{host or '*'}:{port}"
    return kind(f"cannot listen on {where} for {what} ({setting}): {exc.strerror or exc}; "
                f"stop whatever holds the port or set {setting} to a free one")


def leaves(exc: BaseException) -> Iterator[BaseException]:
    """The exceptions inside (nested) exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from leaves(inner)
    else:
        yield exc


def first_startup_error(exc: BaseException) -> StartupError | None:
    return next((e for e in leaves(exc) if isinstance(e, StartupError)), None)
