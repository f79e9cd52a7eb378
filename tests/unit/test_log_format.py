"""Log lines in the layout of Calico's formatter (libcalico-go/lib/logutils/logformat/
logformat.go ``Formatter.Format``, ``FormatForSyslog``, ``AppendTime`` and
``appendKVsAndNewLine``): millisecond local time truncated, ``[LEVEL][pid]``, the file's base
name and line, the message, then the fields sorted by key with strings in strconv.Quote form,
errors and stringers bare, other values as ``%#v``.

The expected lines are what that formatter writes for the same entries (time in UTC, pid
4242), less the newline the handler adds.
"""

from __future__ import annotations

import calendar
import logging
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_typha import gofmt, logs
from trio_typha.gofmt import FIELDS, go_quote
from trio_typha.logs import SyslogFormatter, TyphaFormatter


def record(when: tuple[int, ...], micros: int, level: int, path: str, line: int, msg: str,
           **values: Any) -> logging.LogRecord:
    created = calendar.timegm((*when, 0, 0, 0)) + micros / 1e6
    return logging.makeLogRecord({
        "created": created, "levelno": level, "levelname": logging.getLevelName(level),
        "pathname": path, "filename": path.rsplit("/", 1)[-1], "lineno": line,
        "msg": msg, "args": (), "process": 4242, FIELDS: values})


class UTC(TyphaFormatter):
    utc = True


class SyslogUTC(SyslogFormatter):
    utc = True


ENTRIES = [
    (record((2017, 1, 5, 9, 17, 48), 238_999, logging.INFO, "/go/src/endpoint_mgr.go", 434,
            "Skipping configuration of interface because it is oper down.",
            ifaceName="cali1234"),
     '2017-01-05 09:17:48.238 [INFO][4242] endpoint_mgr.go 434: Skipping configuration of '
     'interface because it is oper down. ifaceName="cali1234"',
     'INFO endpoint_mgr.go 434: Skipping configuration of interface because it is oper '
     'down. ifaceName="cali1234"'),
    (record((2026, 12, 2, 6, 0, 1), 0, logging.WARNING, "/x/pipeline.py", 237,
            "Datastore problem", syncerType="felix", kind="Pod", retries=3, healthy=False,
            age=1.5, big=1e6, err=ConnectionRefusedError("connection refused"),
            note='tab\there "quoted" \\ é\x01'),
     '2026-12-02 06:00:01.000 [WARNING][4242] pipeline.py 237: Datastore problem age=1.5 '
     'big=1e+06 err=connection refused healthy=false kind="Pod" '
     'note="tab\\there \\"quoted\\" \\\\ é\\x01" retries=3 syncerType="felix"',
     'WARNING pipeline.py 237: Datastore problem age=1.5 big=1e+06 err=connection refused '
     'healthy=false kind="Pod" note="tab\\there \\"quoted\\" \\\\ é\\x01" retries=3 '
     'syncerType="felix"'),
    (record((2026, 12, 2, 6, 0, 2), 5_000, logging.ERROR, "/x/shell.py", 88,
            "Internal error"),
     "2026-12-02 06:00:02.005 [ERROR][4242] shell.py 88: Internal error",
     "ERROR shell.py 88: Internal error"),
    (record((2026, 12, 2, 6, 0, 3), 999_000, logging.DEBUG, "/x/a.py", 1, "d",
            Zed="", alpha="x", _u=0),
     '2026-12-02 06:00:03.999 [DEBUG][4242] a.py 1: d Zed="" _u=0 alpha="x"',
     'DEBUG a.py 1: d Zed="" _u=0 alpha="x"'),
]


@pytest.mark.parametrize(("entry", "screen", "syslog"), ENTRIES)
def test_lines_are_calicos_formatters(entry: logging.LogRecord, screen: str,
                                      syslog: str) -> None:
    assert UTC().format(entry) == screen
    assert SyslogUTC().format(entry) == f"calico-typha[4242]: {syslog}"


def test_fields_from_a_log_call_and_a_traceback_after_the_line() -> None:
    captured: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            captured.append(record)

    log = logging.getLogger("trio_typha.test_log_format")
    log.addHandler(keep := Keep())
    log.propagate = False
    try:
        log.warning("Failed %s", "thing", extra=logs.fields(b="two words", a=1))
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("Oops", extra=logs.fields(id="x"))
    finally:
        log.removeHandler(keep)
        log.propagate = True
    first, second = (UTC().format(r) for r in captured)
    assert first.endswith(': Failed thing a=1 b="two words"')
    assert f"test_log_format.py {captured[0].lineno}: " in first
    head, *trace = second.splitlines()
    assert head.endswith(': Oops id="x"') and "[ERROR][" in head
    assert trace[0] == "Traceback (most recent call last):" and trace[-1] == "ValueError: boom"


# Go's strconv.Quote on the same strings (checked against go1.25's strconv).
QUOTED = [
    ("", '""'),
    ("plain", '"plain"'),
    ("\a\b\f\n\r\t\v", '"\\a\\b\\f\\n\\r\\t\\v"'),
    ("\x00\x1f\x7f", '"\\x00\\x1f\\x7f"'),
    ("é 😀", '"é 😀"'),
    ("\u200b\u00a0\u2028", '"\\u200b\\u00a0\\u2028"'),
    ("\U000e0001", '"\\U000e0001"'),
]


@pytest.mark.parametrize(("text", "quoted"), QUOTED)
def test_strings_are_quoted_as_gos_strconv_quote(text: str, quoted: str) -> None:
    assert go_quote(text) == quoted


@given(st.text())
def test_a_quoted_value_is_one_token_that_reads_back(text: str) -> None:
    quoted = go_quote(text)
    assert quoted.startswith('"') and quoted.endswith('"')
    assert "\n" not in quoted and '"' not in quoted[1:-1].replace('\\"', "")
    # Python's unicode_escape reads Go's escapes back, for text without lone surrogates.
    if not any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        body = quoted[1:-1].encode("ascii", "backslashreplace").decode("ascii")
        assert body.encode().decode("unicode_escape") == text


@pytest.mark.parametrize(("value", "text"), [
    (1.0, "1"), (1e6, "1e+06"), (123456.0, "123456"), (123456789.0, "1.23456789e+08"),
    (0.0001, "0.0001"), (1e-05, "1e-05"), (-2.5, "-2.5"), (0.0, "0"),
    (float("inf"), "+Inf"), (float("nan"), "NaN"), (True, "true"), (None, "<nil>"),
    (7, "7")])
def test_other_values_as_go_prints_them(value: Any, text: str) -> None:
    assert gofmt.field_value(value) == text
