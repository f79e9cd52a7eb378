"""Build a breadcrumb's expensive encoding once, off the event loop when it is large.

A snapshot of tens of thousands of keys takes long enough to encode that doing it on the
event loop would stall every other client; here the first session to need it builds it in a
worker thread while later ones wait on the same slot, and all get the same object.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import trio

from .core import Breadcrumb

T = TypeVar("T")

#: Snapshots with at least this many keys are encoded in a worker thread.
THREAD_BUILD_SIZE = 20_000


class _Slot(Generic[T]):
    __slots__ = ("done", "value")

    def __init__(self) -> None:
        self.done: trio.Event | None = None
        self.value: T | None = None


async def build_once(crumb: Breadcrumb, key: tuple[object, ...], size: int,
                     build: Callable[[], T], *,
                     on_built: Callable[[], object] | None = None,
                     on_reused: Callable[[], object] | None = None) -> T:
    """``build()``'s result for ``crumb`` under ``key``, built by the first caller only.

    ``size`` (number of KVs) decides whether the build runs in a worker thread.
    """
    slot: _Slot[T] = crumb.memo(("build-once", *key), lambda _: _Slot())
    if slot.value is not None or slot.done is not None:
        if on_reused is not None:
            on_reused()
    elif on_built is not None:
        on_built()
    if slot.value is None:
        if slot.done is None:
            slot.done = trio.Event()
            try:
                if size >= THREAD_BUILD_SIZE:
                    slot.value = await trio.to_thread.run_sync(build)
                else:
                    slot.value = build()
            finally:
                slot.done.set()
        else:
            await slot.done.wait()
        if slot.value is None:
            raise RuntimeError("building the shared encoding failed")
    return slot.value
