"""The snapshot cache: current KV map plus a chain of sequence-numbered breadcrumbs."""

from .core import Breadcrumb, SnapshotCache
from .feed import CacheFeed

__all__ = ["Breadcrumb", "CacheFeed", "SnapshotCache"]
