"""A list response decoded one item at a time (sans-IO).

A 100k-pod list is one 51 MB JSON document.  Decoded whole it is ~300 MB of dicts alive at
once, before the first pod is converted; and the cache values built while they are alive
leave the freed heap fragmented.  :func:`split_list` decodes the members before ``items``
(``kind``, ``apiVersion``, ``metadata``: the continue token and the resourceVersion come
first in Kubernetes' own encoding) and returns an iterator that decodes each item only when
it is asked for, with the standard library's scanner, so every value is exactly what
``json.loads`` gives.  A document of another shape (``metadata`` after ``items``, not an
object, another encoding) is decoded whole by ``loads``.
"""

from __future__ import annotations

__sans_io__ = True

import json
from collections.abc import Iterator
from json.decoder import WHITESPACE, scanstring  # type: ignore[attr-defined]
from typing import Any

from ..model.jsonload import loads
from .k8s_errors import MalformedResponse

_DECODER = json.JSONDecoder()


def split_list(body: bytes, what: str) -> tuple[dict[str, Any], Iterator[Any]]:
    """``(members other than items, items)`` of a list response; the items are decoded as
    the iterator is advanced and end with :class:`MalformedResponse` if the document does
    (``what`` names the request in errors)."""
    if json.detect_encoding(body) != "utf-8" or body[:3] == b"\xef\xbb\xbf":
        return _whole(body, what)
    try:
        text = body.decode("utf-8", "surrogatepass")  # as json.loads does
    except UnicodeDecodeError as exc:
        raise MalformedResponse(f"{what}: response is not JSON: {exc}") from exc
    head: dict[str, Any] = {}
    try:
        i = _ws(text, 0)
        if text[i:i + 1] != "{":
            return _whole(body, what)
        i = _ws(text, i + 1)
        while text[i:i + 1] == '"':
            key, i = scanstring(text, i + 1)
            i = _ws(text, i)
            if text[i:i + 1] != ":":
                raise MalformedResponse(f"{what}: response is not JSON: ':' expected at {i}")
            i = _ws(text, i + 1)
            if key == "items":
                if "metadata" not in head or text[i:i + 1] != "[":
                    return _whole(body, what)
                return head, _items(text, i + 1, head, what)
            if key in head:
                raise MalformedResponse(f"{what}: duplicate member {key!r}")
            head[key], i = _DECODER.raw_decode(text, i)
            i = _ws(text, i)
            if text[i:i + 1] == ",":
                i = _ws(text, i + 1)
    except (ValueError, RecursionError) as exc:
        raise MalformedResponse(f"{what}: response is not JSON: {_brief(exc)}") from exc
    return _whole(body, what)  # no items member (or garbage): as json.loads decides


def _brief(exc: Exception) -> str:
    return "nested too deeply" if isinstance(exc, RecursionError) else str(exc)


def _ws(text: str, i: int) -> int:
    end: int = WHITESPACE.match(text, i).end()
    return end


def json_object(body: bytes, what: str) -> dict[str, Any]:
    """``body`` decoded whole; :class:`MalformedResponse` unless it is a JSON object."""
    try:
        doc = loads(body)
    except ValueError as exc:
        raise MalformedResponse(f"{what}: response is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise MalformedResponse(f"{what}: response is not a JSON object")
    return doc


def _whole(body: bytes, what: str) -> tuple[dict[str, Any], Iterator[Any]]:
    doc = json_object(body, what)
    items = doc.pop("items", None) or []
    if not isinstance(items, list):
        raise MalformedResponse(f"{what}: items is not a list")
    return doc, iter(items)


def _items(text: str, i: int, head: dict[str, Any], what: str) -> Iterator[Any]:
    """The items from ``text[i:]`` (just after ``[``), then the rest of the document
    checked (more members go into ``head``, after which nothing but whitespace)."""
    try:
        i = _ws(text, i)
        if text[i:i + 1] == "]":
            i += 1
        else:
            while True:
                item, i = _DECODER.raw_decode(text, i)
                yield item
                del item  # only the consumer holds it now
                i = _ws(text, i)
                c = text[i:i + 1]
                if c == "]":
                    i += 1
                    break
                if c != ",":
                    raise MalformedResponse(f"{what}: response is not JSON: ',' or ']' "
                                            f"expected in items at {i}")
                i = _ws(text, i + 1)
        i = _ws(text, i)
        while text[i:i + 1] == ",":
            i = _ws(text, i + 1)
            key, i = scanstring(text, i + 1) if text[i:i + 1] == '"' else ("", -1)
            if i < 0:
                raise MalformedResponse(f"{what}: response is not JSON: member expected")
            i = _ws(text, i)
            if text[i:i + 1] != ":":
                raise MalformedResponse(f"{what}: response is not JSON: ':' expected at {i}")
            if key in head or key == "items":
                raise MalformedResponse(f"{what}: duplicate member {key!r}")
            head[key], i = _DECODER.raw_decode(text, _ws(text, i + 1))
            i = _ws(text, i)
        if text[i:i + 1] != "}" or _ws(text, i + 1) != len(text):
            raise MalformedResponse(f"{what}: response is not JSON: '}}' expected at {i}")
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, MalformedResponse):
            raise
        raise MalformedResponse(f"{what}: response is not JSON: {_brief(exc)}") from exc
