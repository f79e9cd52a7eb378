"""The e2e suite's one fixture: the cluster under test (tests/e2e/cluster.py decides which)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, open_cluster


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with open_cluster(tmp_path) as c:
        yield c
