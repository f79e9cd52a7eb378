"""Which cluster the e2e suite targets (tests/e2e/cluster.py: real_kubeconfig)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.e2e.cluster import (
    CONTEXT_ENV,
    KIND_CONTEXT,
    KUBECONFIG_ENV,
    RefusedContext,
    real_kubeconfig,
)


@pytest.fixture(autouse=True)
def no_e2e_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CONTEXT_ENV, raising=False)


def kubeconfig(path: Path, current: str, contexts: tuple[str, ...] = (KIND_CONTEXT, "prod")
               ) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": n, "context": {"cluster": "c", "user": "u"}}
                     for n in contexts]}))
    return path


def test_explicit_kubeconfig_means_its_kind_context_never_the_current_one(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "kc", "prod")
    monkeypatch.setenv(KUBECONFIG_ENV, str(path))
    assert real_kubeconfig() == (str(path), KIND_CONTEXT)


def test_a_named_context_is_used_and_a_missing_one_refused(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "kc", KIND_CONTEXT)))
    monkeypatch.setenv(CONTEXT_ENV, "prod")
    assert real_kubeconfig() == (None, "prod")
    monkeypatch.setenv(CONTEXT_ENV, "staging")
    with pytest.raises(RefusedContext, match="has no context staging"):
        real_kubeconfig()


def test_explicit_kubeconfig_without_the_kind_context_is_refused(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``TRIO_TYPHA_E2E_KUBECONFIG`` pointed at another cluster's kubeconfig: refused,
    not run against its current context."""
    monkeypatch.setenv(KUBECONFIG_ENV, str(kubeconfig(tmp_path / "kc", "prod", ("prod",))))
    with pytest.raises(RefusedContext, match=f"has no context {KIND_CONTEXT}"):
        real_kubeconfig()


def test_current_kind_context_means_the_kind_bed(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "kc", KIND_CONTEXT)))
    assert real_kubeconfig() == (None, KIND_CONTEXT)


def test_any_other_context_or_none_means_the_embedded_bed(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "kc", "prod")))
    assert real_kubeconfig() is None  # never test someone's production cluster by accident
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert real_kubeconfig() is None
