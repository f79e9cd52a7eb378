"""Generated files are what their generator's last run wrote.

Each ``*.generated.json`` manifest names the generator, the source it read (Calico version
and commit, Kubernetes module versions) and the sha256 of every file it wrote; a hand edit
of a generated file, or a generator run left uncommitted, fails here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tools.generated import manifests, record, stale

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = manifests()


def test_the_transcribed_calico_data_has_manifests() -> None:
    names = {n for m in MANIFESTS for n in json.loads(m.read_text("utf-8"))["files"]}
    assert "trio_typha/model/goschema.py" in names
    assert {"tests/unit/model/golden/calico_v3.json", "tests/unit/model/golden/validation.json",
            "tests/unit/model/golden/etcd_ipam.json"} <= names


def test_every_generated_file_is_as_recorded() -> None:
    problems = [p for m in MANIFESTS for p in stale(m, ROOT)]
    assert problems == []


def test_every_manifest_says_what_it_was_made_from() -> None:
    for m in MANIFESTS:
        data = json.loads(m.read_text("utf-8"))
        assert data["generator"] and data["calico_version"].startswith("v3.")
        assert len(data["calico_commit"]) == 40


def test_a_hand_edit_is_caught(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    made = tmp_path / "pkg" / "table.py"
    made.write_text("X = 1\n", "utf-8")
    manifest = tmp_path / "pkg" / "table.generated.json"
    record(manifest, tmp_path, [made], {"generator": "gen.py"})
    assert stale(manifest, tmp_path) == []
    made.write_text("X = 2\n", "utf-8")
    assert stale(manifest, tmp_path) == [
        "pkg/table.py: not what gen.py wrote; change the generator or its source and run it again"]
    made.unlink()
    assert stale(manifest, tmp_path) == ["pkg/table.py: missing (recorded by gen.py)"]


def test_the_committed_goschema_manifest_matches_a_copy(tmp_path: Path) -> None:
    # The manifest's paths are relative to the repository root, so a checkout moved
    # elsewhere checks the same.
    manifest = ROOT / "trio_typha" / "model" / "goschema.generated.json"
    (tmp_path / "trio_typha" / "model").mkdir(parents=True)
    shutil.copy(ROOT / "trio_typha" / "model" / "goschema.py", tmp_path / "trio_typha" / "model")
    assert stale(manifest, tmp_path) == []
