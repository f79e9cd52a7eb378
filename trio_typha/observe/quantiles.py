"""Prometheus summaries with quantiles over a sliding window, as Go's client exports them.

prometheus-client's ``Summary`` keeps only a count and a sum, so Typha's dashboards
(``typha_client_latency_secs{quantile="0.99"}``) would show nothing.  Go's summaries
report the 0.5, 0.9 and 0.99 quantiles over the last ``MaxAge`` (10 minutes by default, one
minute for ``typha_client_latency_secs``), kept in ``AgeBuckets`` rotating windows (5 by
default, 2 for client latency).

:class:`Window` is the pure core: time-sliced buckets of samples (each bounded by
reservoir sampling, so memory stays flat however many observations arrive); a quantile is
read from the slices that make up Go's current head stream, which covers between
``MaxAge * (1 - 1/AgeBuckets)`` and ``MaxAge`` of history.  With no observation in the
window a quantile is NaN, as in Go.  :class:`QuantileSummary` is the labelled metric,
collected by a prometheus-client registry; both take the time from their caller.
"""

from __future__ import annotations

__sans_io__ = True

import math
import threading
from collections.abc import Callable, Iterator, Sequence

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

#: Go's default objectives for every Typha summary.
QUANTILES = (0.5, 0.9, 0.99)
DEFAULT_MAX_AGE = 600.0  # Go's DefMaxAge: 10 minutes
DEFAULT_AGE_BUCKETS = 5  # Go's DefAgeBuckets
#: Samples kept per time slice; beyond it, reservoir sampling keeps a uniform subset.
SLICE_CAPACITY = 2048


class Window:
    """Samples of the last ``max_age`` seconds, in ``age_buckets`` slices (pure).

    Each slice holds (value, weight) pairs; past ``capacity`` pairs it is compacted into
    ``capacity // 2`` pairs of equal weight (sorted, each standing for its run of values),
    so a bulk observation costs O(1) and a slice's memory is bounded.
    """

    def __init__(self, *, max_age: float = DEFAULT_MAX_AGE,
                 age_buckets: int = DEFAULT_AGE_BUCKETS, capacity: int = SLICE_CAPACITY
                 ) -> None:
        self.slice_secs = max_age / age_buckets
        self.age_buckets = age_buckets
        self.capacity = capacity
        self._slices: dict[int, list[tuple[float, int]]] = {}

    def observe(self, value: float, now: float, count: int = 1) -> None:
        index = int(now // self.slice_secs)
        pairs = self._slices.get(index)
        if pairs is None:
            pairs = self._slices[index] = []
            self._expire(index)
        pairs.append((value, count))
        if len(pairs) > self.capacity:
            pairs[:] = _compact(pairs, self.capacity // 2)

    def _expire(self, current: int) -> None:
        oldest = current - self.age_buckets + 1
        for index in [i for i in self._slices if i < oldest]:
            del self._slices[index]

    def quantiles(self, now: float, qs: Sequence[float] = QUANTILES) -> list[float]:
        """The ``qs`` quantiles of the window (NaN each when it is empty)."""
        self._expire(int(now // self.slice_secs))
        pairs = sorted(p for pairs in self._slices.values() for p in pairs)
        total = sum(w for _, w in pairs)
        if not total:
            return [math.nan for _ in qs]
        out = []
        for q in qs:
            target, acc = q * total, 0
            chosen = pairs[-1][0]
            for value, weight in pairs:
                acc += weight
                if acc >= target:
                    chosen = value
                    break
            out.append(chosen)
        return out


def _compact(pairs: list[tuple[float, int]], size: int) -> list[tuple[float, int]]:
    pairs.sort()
    total = sum(w for _, w in pairs)
    step = total / size
    out: list[tuple[float, int]] = []
    acc = run = 0
    for value, weight in pairs:
        acc += weight
        run += weight
        if acc >= step * (len(out) + 1) or value == pairs[-1][0]:
            out.append((value, run))
            run = 0
    if run:
        out.append((pairs[-1][0], run))
    return out


class _Child:
    __slots__ = ("_lock", "_window", "_clock", "count", "sum")

    def __init__(self, window: Window, clock: Callable[[], float]) -> None:
        self._lock = threading.Lock()
        self._window = window
        self._clock = clock
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        with self._lock:
            self.count += 1
            self.sum += value
            self._window.observe(value, self._clock())

    def observe_many(self, value: float, count: int) -> None:
        """``count`` observations of one value (a broadcast round), in O(1) per slice."""
        if count <= 0:
            return
        with self._lock:
            self.count += count
            self.sum += value * count
            self._window.observe(value, self._clock(), count)

    def quantiles(self) -> list[float]:
        with self._lock:
            return self._window.quantiles(self._clock())


class QuantileSummary(Collector):
    """A labelled summary with Go's quantiles; ``labels(...)`` gives the observer.

    ``clock`` is the one time source of its windows: the shell that owns the metrics passes
    trio's clock in, so observations and collections agree on what "now" is."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (), *,
                 registry: CollectorRegistry | None = None, max_age: float = DEFAULT_MAX_AGE,
                 age_buckets: int = DEFAULT_AGE_BUCKETS, clock: Callable[[], float]) -> None:
        self.name = name
        self.documentation = documentation
        self._labelnames = tuple(labelnames)
        self.max_age = max_age
        self.age_buckets = age_buckets
        self._clock = clock
        self._children: dict[tuple[str, ...], _Child] = {}
        self._lock = threading.Lock()
        if registry is not None:
            registry.register(self)

    def labels(self, *values: str, **kw: str) -> _Child:
        key = tuple(kw[n] for n in self._labelnames) if kw else tuple(values)
        with self._lock:
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = _Child(
                    Window(max_age=self.max_age, age_buckets=self.age_buckets), self._clock)
            return child

    def describe(self) -> Iterator[Metric]:
        yield Metric(self.name, self.documentation, "summary")

    def collect(self) -> Iterator[Metric]:
        metric = Metric(self.name, self.documentation, "summary")
        with self._lock:
            children = list(self._children.items())
        for key, child in children:
            labels = dict(zip(self._labelnames, key, strict=True))
            for q, v in zip(QUANTILES, child.quantiles(), strict=True):
                metric.add_sample(self.name, {**labels, "quantile": str(q)}, v)
            metric.add_sample(self.name + "_sum", labels, child.sum)
            metric.add_sample(self.name + "_count", labels, float(child.count))
        yield metric
