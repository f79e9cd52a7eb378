"""tools/gen_goldens.py's own parts, without Go or a Calico checkout.

Running the Go program against a Calico checkout is the maintainer's step (tools/README.md);
test_generated.py checks that the committed goldens are what that run wrote.  Here: the
inputs it takes from the goldens, the files it writes back from answers, and the go.mod it
builds against a checkout.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.gen_goldens import ANSWERS, GOLDEN, GoldenError, go_mod, inputs, main, merge, render


def test_inputs_leave_out_every_answer_field() -> None:
    got = inputs()
    for name, fields in ANSWERS.items():
        committed = json.loads((GOLDEN / f"{name}.json").read_text("utf-8"))
        assert len(got[name]) == len(committed)
        for case, full in zip(got[name], committed, strict=True):
            assert not set(fields) & set(case)
            assert case == {k: v for k, v in full.items() if k not in fields}


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_the_committed_golden_is_its_inputs_and_answers_written_back(name: str) -> None:
    # The answers as the Go program reports them: a bare value for one field, an object
    # for several.
    committed = json.loads((GOLDEN / f"{name}.json").read_text("utf-8"))
    fields = ANSWERS[name]
    answers = [c[fields[0]] if len(fields) == 1 else {f: c[f] for f in fields}
               for c in committed]
    text = render(merge(name, inputs()[name], answers))
    assert text == (GOLDEN / f"{name}.json").read_text("utf-8")


def test_answers_that_do_not_fit_the_inputs_are_refused() -> None:
    cases = [{"kind": "IPAMBlock", "path": "/p", "stored": ""}]
    with pytest.raises(GoldenError, match="1 inputs but 0 answers"):
        merge("etcd_ipam", cases, [])
    with pytest.raises(GoldenError, match="does not have the fields"):
        merge("etcd_ipam", cases, [{"key": None}])
    assert merge("etcd_ipam", cases, [{"value": None, "key": None}]) == [
        {"kind": "IPAMBlock", "path": "/p", "stored": "", "key": None, "value": None}]


def test_render_keeps_unicode_and_order() -> None:
    text = render([{"z": "Node_1.ä", "a": [1, None]}])
    assert text == '[\n {\n  "z": "Node_1.ä",\n  "a": [\n   1,\n   null\n  ]\n }\n]\n'


CALICO_GO_MOD = """module github.com/projectcalico/calico

go 1.25.11

require (
\tgithub.com/json-iterator/go v1.1.12
)

replace (
\tgithub.com/projectcalico/api => ./api
\tgithub.com/projectcalico/calico/lib/std => ./lib/std // the monorepo's copy

\t// the Kubernetes staging modules at the release's version
\tk8s.io/api => k8s.io/api v0.35.6
)

replace example.com/one => ../one
"""


def test_go_mod_replaces_calico_by_the_checkout_and_keeps_its_replaces(tmp_path: Path) -> None:
    calico = tmp_path / "calico"
    text = go_mod(calico, CALICO_GO_MOD)
    assert text.startswith("module goldens\n\ngo 1.25.11\n\n")
    assert ("require github.com/projectcalico/calico v0.0.0-00010101000000-000000000000\n"
            in text)
    replaces = text.split("replace (\n", 1)[1].split("\n)", 1)[0].splitlines()
    assert replaces == [
        f"\tgithub.com/projectcalico/calico => {calico}",
        f"\tgithub.com/projectcalico/api => {calico}/api",
        f"\tgithub.com/projectcalico/calico/lib/std => {calico}/lib/std",
        "\tk8s.io/api => k8s.io/api v0.35.6",
        f"\texample.com/one => {tmp_path}/one",
    ]


def test_a_go_mod_without_a_go_version_is_refused(tmp_path: Path) -> None:
    with pytest.raises(GoldenError, match="no Go version"):
        go_mod(tmp_path, "module x\n")


def test_a_directory_that_is_not_a_checkout_stops_before_building(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="holds no go.mod"):
        main(["--calico", str(tmp_path), "--check"])
