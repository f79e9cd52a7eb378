"""The build step's compiled model (setup.py, mypyc) against the pure sources, byte for byte.

The wheel is built here as ``pip wheel`` builds the container image's (``TRIO_TYPHA_COMPILE=1``:
compiling must work, not fall back), unpacked into a directory, and
``tests/native_parity.py`` runs the golden conversions and validations in it twice: from the
compiled modules, and from the same tree's sources (``TRIO_TYPHA_PURE=1``).  Every output
must be the same bytes, and each run must have loaded what it says.  The model's unit tests
run the sources (an editable install stays pure), so this is where the compiled code is
checked.  Needs a C compiler and Python's headers (tests/run.sh installs them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compiled_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("native")
    wheels = out / "wheels"
    # --no-build-isolation: mypy and setuptools come from the test extras, no download
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(wheels), str(REPO)],
                   check=True, env={**os.environ, "TRIO_TYPHA_COMPILE": "1"})
    (wheel,) = wheels.glob("trio_typha-*.whl")
    tree = out / "tree"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tree)
    return tree


def _run(tree: Path, **env: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(REPO / "tests" / "native_parity.py"), str(tree)],
                          check=True, capture_output=True, env={**os.environ, **env})
    return json.loads(done.stdout)


def test_compiled_model_gives_the_sources_bytes(compiled_tree: Path) -> None:
    sys.path.insert(0, str(REPO))
    try:
        from setup import native_modules
    finally:
        sys.path.remove(str(REPO))
    expected = sorted("trio_typha.model." + Path(p).stem for p in native_modules())
    compiled = _run(compiled_tree)
    pure = _run(compiled_tree, TRIO_TYPHA_PURE="1")
    # every module setup.py compiles was loaded compiled (those the inputs import), none pure
    assert compiled["compiled"] and set(compiled["compiled"]) <= set(expected)
    assert "trio_typha.model.endpoints" in compiled["compiled"]
    assert pure["compiled"] == []
    assert compiled["state"].startswith("model modules: compiled with mypyc")
    assert pure["state"] == "model modules: pure Python (TRIO_TYPHA_PURE is set)"
    for part in ("golden", "optional", "validation", "synthetic"):
        assert compiled[part] == pure[part], part
        assert any(compiled[part]), part  # the inputs did produce outputs


def test_a_build_without_its_shared_library_falls_back_to_the_sources(
        compiled_tree: Path, tmp_path: Path) -> None:
    """A wheel whose compiled modules cannot load (the shared library gone, as when it was
    built for another interpreter) runs from its sources, and says so."""
    import shutil

    tree = tmp_path / "tree"
    shutil.copytree(compiled_tree, tree)
    (lib,) = tree.glob("trio_typha_native__mypyc*")
    lib.unlink()
    assert list((tree / "trio_typha" / "model").glob("*.so"))  # the per-module stubs stay
    broken = _run(tree)
    assert broken["compiled"] == []
    assert broken["state"] == ("model modules: pure Python (this install was built without "
                               "a C compiler or mypyc)")
    assert broken["golden"] == _run(compiled_tree, TRIO_TYPHA_PURE="1")["golden"]
