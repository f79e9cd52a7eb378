"""``GET /connections`` and the ``trio-typha connections`` table (pure).

The server answers with one JSON document per replica: who it is, and one row per client
session (from :meth:`~trio_typha.sessions.connections.ConnectionRegistry.snapshot`).  The
command line fetches it from one or more replicas and renders the rows, then the spread of
connections over replicas and syncer types, flagging skew in the total and in each syncer
type: the question load sharing between Typha replicas asks of a Typha fleet ("which
calico-node is connected where, and is the load even?").
"""

from __future__ import annotations

__sans_io__ = True

import datetime
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ..model.kv import SYNCER_TYPES

#: A replica whose share is this much above or below the mean is flagged (Typha's limit
#: allows 20 % headroom over an even share).
SKEW_TOLERANCE = 0.2


def connections_document(replica: str, rows: list[dict[str, Any]], *, version: str,
                         limit: int | None, accepted: int | None = None) -> bytes:
    """``accepted``: a ServerWorkers worker's count of sockets taken from the primary."""
    doc = {"replica": replica, "version": version, "connection_limit": limit,
           "connections": rows}
    if accepted is not None:
        doc["accepted"] = accepted
    return json.dumps(doc, sort_keys=True).encode()


_COLUMNS = (("REPLICA", "replica"), ("ID", "id"), ("PEER", "peer"), ("HOSTNAME", "hostname"),
            ("SYNCER", "syncer_type"), ("PROTO", "protocol"), ("TLS", "tls_identity"),
            ("COMPR", "compression"), ("RESUME", "resume"), ("STATE", "state"), ("SEQ", "seq"),
            ("LAG", "lag_seq"), ("LAG S", "lag_secs"), ("SENT", "bytes_sent"),
            ("MSGS", "messages_sent"), ("SINCE", "connected_since"))


def _cell(key: str, value: Any) -> str:
    if value is None or value == "":
        return "-"
    if key == "id":
        return f"{value:#x}"
    if key == "connected_since":
        return datetime.datetime.fromtimestamp(value, datetime.UTC).strftime("%H:%M:%S")
    if key == "lag_secs":
        return f"{value:.1f}"
    if key == "bytes_sent":
        return _bytes(value)
    return str(value)


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n:.1f}GiB"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in [header, *rows]]


def render(documents: Mapping[str, Mapping[str, Any] | str]) -> str:
    """The table for ``documents`` (replica address → its /connections JSON, or an error
    string when it could not be fetched)."""
    lines: list[str] = []
    rows = []
    for addr, doc in documents.items():
        if isinstance(doc, str):
            continue
        for row in doc.get("connections", ()):
            rows.append([addr if k == "replica" else _cell(k, row.get(k)) for _, k in _COLUMNS])
    rows.sort(key=lambda r: (r[0], r[3], r[4]))
    lines += _table([h for h, _ in _COLUMNS], rows)
    lines.append("")
    lines += spread(documents)
    return "\n".join(lines) + "\n"


def _skew(count: int, mean: float, replicas: int) -> str | None:
    """How far ``count`` is off ``mean``, when that is more than rounding explains (one
    connection) and more than the tolerance."""
    off = count - mean
    if replicas > 1 and abs(off) >= 1 and abs(off) > SKEW_TOLERANCE * mean:
        return f"{off:+.1f} vs mean {mean:.1f}"
    return None


def spread(documents: Mapping[str, Mapping[str, Any] | str]) -> list[str]:
    """Connections per replica and syncer type, with each replica's share and skew flags."""
    syncers = list(SYNCER_TYPES)
    counts: dict[str, Counter[str]] = {}
    for addr, doc in documents.items():
        if not isinstance(doc, str):
            counts[addr] = Counter(r.get("syncer_type") or "(handshake)"
                                   for r in doc.get("connections", ()))
    totals = {addr: sum(c.values()) for addr, c in counts.items()}
    mean = sum(totals.values()) / len(totals) if totals else 0.0
    # Each syncer type is balanced on its own: a replica holding every felix and another
    # every bgp connection have even totals and are still skewed.
    means = {s: sum(c[s] for c in counts.values()) / len(counts) if counts else 0.0
             for s in syncers}
    header = ["REPLICA", "TOTAL", *syncers, "SHARE", "FLAG"]
    rows = []
    for addr, doc in documents.items():
        if isinstance(doc, str):
            rows.append([addr, "-", *["-"] * len(syncers), "-", f"UNREACHABLE: {doc}"])
            continue
        total = totals[addr]
        share = total / sum(totals.values()) if sum(totals.values()) else 0.0
        flags = []
        if (skew := _skew(total, mean, len(totals))) is not None:
            flags.append(f"SKEW: {skew}")
        for syncer in syncers:
            if (skew := _skew(counts[addr][syncer], means[syncer], len(totals))) is not None:
                flags.append(f"SKEW {syncer}: {skew}")
        limit = doc.get("connection_limit")
        if limit is not None and total > limit:
            flags.append(f"over limit {limit}")
        flag = "; ".join(flags)
        rows.append([addr, str(total), *[str(counts[addr][s]) for s in syncers],
                     f"{share:.0%}", flag])
    lines = _table(header, rows)
    hosts = Counter((r.get("hostname"), r.get("syncer_type")) for doc in documents.values()
                    if not isinstance(doc, str) for r in doc.get("connections", ())
                    if r.get("hostname"))
    dupes = sorted(f"{h}/{s}" for (h, s), n in hosts.items() if n > 1)
    if dupes:
        lines.append("Connected more than once (same hostname and syncer): " + ", ".join(dupes))
    return lines
