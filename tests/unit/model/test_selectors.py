"""Calico selector parsing and canonical printing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_typha.model import selectors


@pytest.mark.parametrize(("text", "printed"), [
    ("", "all()"),
    ("all()", "all()"),
    ("global()", "global()"),
    ("a == 'x'", 'a == "x"'),
    ("a == 'x\"y'", "a == 'x\"y'"),
    ("a != \"v\"", 'a != "v"'),
    ("a contains 'v'", 'a contains "v"'),
    ("a starts with 'v'", 'a starts with "v"'),
    ("a   ends   with'v'", 'a ends with "v"'),
    ("has( a )", "has(a)"),
    ("a in {'z', 'a', 'z'}", 'a in {"a", "z"}'),
    ("a not in {}", "a not in {}"),
    ("a notin {'x',}", 'a not in {"x"}'),
    ("!!has(a)", "has(a)"),
    ("!!!has(a)", "!has(a)"),
    ("(a == 'x')", 'a == "x"'),
    ("a == '1' && b == '2' && c == '3'", '(a == "1" && b == "2" && c == "3")'),
    ("a == '1' && (b == '2' && c == '3')", '(a == "1" && (b == "2" && c == "3"))'),
    ("a == '1' || b == '2' && c == '3'", '(a == "1" || (b == "2" && c == "3"))'),
    ("!(a == '1' || b == '2')", '!(a == "1" || b == "2")'),
    ("!has(key) || (has(key) && !key in {'value'})",
     '(!has(key) || (has(key) && !key in {"value"}))'),
])
def test_canonical_form(text: str, printed: str) -> None:
    assert selectors.canonical(text) == printed


def test_prefix_matches_calico_rules_test() -> None:
    # libcalico-go's rules_test.go expects exactly this for the namespace selector below.
    assert selectors.prefixed("!has(key) || (has(key) && !key in {'value'})", "pcns.") == \
        '(!has(pcns.key) || (has(pcns.key) && !pcns.key in {"value"}))'
    assert selectors.prefixed("all()", "pcns.") == "all()"
    assert selectors.prefixed("bad((", "pcns.") == ""


@pytest.mark.parametrize("bad", [
    "a", "a ==", "a == b", "a = 'x'", "a & b", "a | b", "'x'", "a in 'x'", "a in {'x'",
    "has(a", "has()", "all(x)", "a == 'x' b == 'y'", "(a == 'x'", "a == 'x')", "a == 'x",
    "a inx {}", "x" * 513 + " == 'a'",
])
def test_invalid(bad: str) -> None:
    assert not selectors.validate(bad)
    with pytest.raises(selectors.SelectorError):
        selectors.parse(bad)


labels = st.from_regex(r"[a-zA-Z0-9_./-]{1,12}", fullmatch=True).filter(
    lambda s: s not in ("contains",))
values = st.text(st.characters(blacklist_characters="'\""), max_size=6)


@st.composite
def selector_trees(draw: st.DrawFn, depth: int = 0) -> str:
    leaf = st.one_of(
        st.builds(lambda a, v: f"{a} == '{v}'", labels, values),
        st.builds(lambda a, v: f"{a} != \"{v}\"", labels, values),
        st.builds(lambda a: f"has({a})", labels),
        st.builds(lambda a, vs: f"{a} in {{{', '.join(repr(v) for v in vs)}}}", labels,
                  st.lists(values, max_size=3)),
        st.just("all()"), st.just("global()"))
    if depth >= 2 or draw(st.booleans()):
        node = draw(leaf)
    else:
        op = draw(st.sampled_from([" && ", " || "]))
        parts = draw(st.lists(selector_trees(depth + 1), min_size=2, max_size=3))
        node = "(" + op.join(parts) + ")"
    return ("!" if draw(st.booleans()) else "") + node


@given(selector_trees())
def test_canonical_form_is_a_fixed_point(text: str) -> None:
    once = selectors.canonical(text)
    assert selectors.canonical(once) == once
