"""Which cluster the e2e suite targets (tests/e2e/cluster.py: real_kubeconfig)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.e2e.cluster import KIND_CONTEXT, KUBECONFIG_ENV, real_kubeconfig


def kubeconfig(path: Path, current: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": n, "context": {"cluster": "c", "user": "u"}}
                     for n in (KIND_CONTEXT, "prod")]}))
    return path


def test_explicit_kubeconfig_means_a_real_cluster(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "kc", "prod")
    monkeypatch.setenv(KUBECONFIG_ENV, str(path))
    assert real_kubeconfig() == (str(path), None)


def test_current_kind_context_means_the_kind_bed(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    monkeypatch.delenv(KUBECONFIG_ENV, raising=False)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "kc", KIND_CONTEXT)))
    assert real_kubeconfig() == (None, KIND_CONTEXT)


def test_any_other_context_or_none_means_the_embedded_bed(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    monkeypatch.delenv(KUBECONFIG_ENV, raising=False)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "kc", "prod")))
    assert real_kubeconfig() is None  # never test someone's production cluster by accident
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert real_kubeconfig() is None
