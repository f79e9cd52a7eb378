"""Calico's label-selector language: tokenizer, parser and canonical printer.

The update processors re-print namespace and service-account selectors after adding a label
prefix (``pcns.`` / ``pcsa.``), so the printed form must match Calico's
(``libcalico-go/lib/selector``) character for character: values in double quotes (single
when the value holds a double quote), every multi-operand ``&&``/``||`` group wrapped in one
pair of parentheses, ``!`` written straight before its operand, set literals sorted and
de-duplicated, an empty selector printed as ``all()``.
"""

from __future__ import annotations

__sans_io__ = True

import abc
from dataclasses import dataclass

MAX_LABEL_LENGTH = 512


class SelectorError(ValueError):
    """The selector does not parse."""


# --------------------------------------------------------------------------------------------
# Tokens

LABEL, STRING, LBRACE, RBRACE, COMMA, EQ, NE, IN, NOT, NOT_IN, CONTAINS, STARTS_WITH, \
    ENDS_WITH, ALL, HAS, LPAREN, RPAREN, AND, OR, GLOBAL, EOF = range(21)

Token = tuple[int, str]


def _ident_char(c: str) -> bool:
    return ("a" <= c <= "z" or "A" <= c <= "Z" or "0" <= c <= "9" or c in "_./-")


def _trim_ws(s: str, i: int) -> int:
    while i < len(s) and s[i] in " \t":
        i += 1
    return i


def _cut_ident(s: str, i: int) -> tuple[str, int]:
    j = i
    while j < len(s) and _ident_char(s[j]):
        j += 1
    ident = s[i:j]
    if len(ident) > MAX_LABEL_LENGTH:
        raise SelectorError(f"label too long: {ident}")
    if not ident:
        raise SelectorError("expected identifier")
    return ident, j


def _word_boundary(s: str, i: int) -> bool:
    return i >= len(s) or not _ident_char(s[i])


def _cut_words(s: str, i: int, *words: str) -> int | None:
    """Index after ``words`` (whitespace between and after them skipped), at a word
    boundary; None if they are not there."""
    j = i
    for w in words:
        if not s.startswith(w, j):
            return None
        j = _trim_ws(s, j + len(w))
    if len(words) == 1:
        # A single keyword is checked for a boundary right after it, before whitespace.
        k = i + len(words[0])
        return k if _word_boundary(s, k) else None
    return j if _word_boundary(s, j) else None


def tokenize(s: str) -> list[Token]:
    tokens: list[Token] = []
    i = 0
    while True:
        i = _trim_ws(s, i)
        if i >= len(s):
            tokens.append((EOF, ""))
            return tokens
        c = s[i]
        last = tokens[-1][0] if tokens else None
        if c == "(":
            tokens.append((LPAREN, ""))
            i += 1
        elif c == ")":
            tokens.append((RPAREN, ""))
            i += 1
        elif c in "\"'":
            end = s.find(c, i + 1)
            if end < 0:
                raise SelectorError("unterminated string")
            tokens.append((STRING, s[i + 1:end]))
            i = end + 1
        elif c == "{":
            tokens.append((LBRACE, ""))
            i += 1
        elif c == "}":
            tokens.append((RBRACE, ""))
            i += 1
        elif c == ",":
            tokens.append((COMMA, ""))
            i += 1
        elif c == "=":
            if not s.startswith("==", i):
                raise SelectorError("expected ==")
            tokens.append((EQ, ""))
            i += 2
        elif c == "!":
            if s.startswith("!=", i):
                tokens.append((NE, ""))
                i += 2
            else:
                tokens.append((NOT, ""))
                i += 1
        elif c == "&":
            if not s.startswith("&&", i):
                raise SelectorError("expected &&")
            tokens.append((AND, ""))
            i += 2
        elif c == "|":
            if not s.startswith("||", i):
                raise SelectorError("expected ||")
            tokens.append((OR, ""))
            i += 2
        elif last == LABEL:
            for kind, words in ((CONTAINS, ("contains",)), (STARTS_WITH, ("starts", "with")),
                                (ENDS_WITH, ("ends", "with")), (NOT_IN, ("not", "in")),
                                (IN, ("in",))):
                j = _cut_words(s, i, *words)
                if j is not None:
                    tokens.append((kind, ""))
                    i = j
                    break
            else:
                raise SelectorError(f"expected operator after label {tokens[-1][1]!r}")
        elif s.startswith("has(", i):
            i = _trim_ws(s, i + 4)
            ident, i = _cut_ident(s, i)
            i = _trim_ws(s, i)
            if not s.startswith(")", i):
                raise SelectorError("no closing ')' after has(")
            tokens.append((HAS, ident))
            i += 1
        elif s.startswith("all(", i):
            i = _trim_ws(s, i + 4)
            if not s.startswith(")", i):
                raise SelectorError("no closing ')' after all(")
            tokens.append((ALL, ""))
            i += 1
        elif s.startswith("global(", i):
            i = _trim_ws(s, i + 7)
            if not s.startswith(")", i):
                raise SelectorError("no closing ')' after global(")
            tokens.append((GLOBAL, ""))
            i += 1
        else:
            ident, i = _cut_ident(s, i)
            tokens.append((LABEL, ident))


# --------------------------------------------------------------------------------------------
# AST


class Node(abc.ABC):
    @abc.abstractmethod
    def fragments(self, out: list[str]) -> None:
        """Append the canonical text of this node to ``out``."""

    def prefix_labels(self, prefix: str) -> None:  # noqa: B027 - no labels by default
        """Calico's PrefixVisitor: prepend ``prefix`` to every label name."""


def _quoted(v: str) -> str:
    q = "'" if '"' in v else '"'
    return f"{q}{v}{q}"


@dataclass
class LabelOp(Node):
    label: str
    op: str  # " == ", " != ", " contains ", " starts with ", " ends with "
    value: str

    def fragments(self, out: list[str]) -> None:
        out += (self.label, self.op, _quoted(self.value))

    def prefix_labels(self, prefix: str) -> None:
        self.label = prefix + self.label


@dataclass
class LabelInSet(Node):
    label: str
    negated: bool  # "not in"
    values: list[str]

    def fragments(self, out: list[str]) -> None:
        out += (self.label, " not in {" if self.negated else " in {",
                ", ".join(_quoted(v) for v in self.values), "}")

    def prefix_labels(self, prefix: str) -> None:
        self.label = prefix + self.label


@dataclass
class Has(Node):
    label: str

    def fragments(self, out: list[str]) -> None:
        out += ("has(", self.label, ")")

    def prefix_labels(self, prefix: str) -> None:
        self.label = prefix + self.label


@dataclass
class All(Node):
    def fragments(self, out: list[str]) -> None:
        out.append("all()")


@dataclass
class Global(Node):
    def fragments(self, out: list[str]) -> None:
        out.append("global()")


@dataclass
class Not(Node):
    operand: Node

    def fragments(self, out: list[str]) -> None:
        out.append("!")
        self.operand.fragments(out)

    def prefix_labels(self, prefix: str) -> None:
        self.operand.prefix_labels(prefix)


@dataclass
class Group(Node):
    joiner: str  # " && " or " || "
    operands: list[Node]

    def fragments(self, out: list[str]) -> None:
        out.append("(")
        for i, op in enumerate(self.operands):
            if i:
                out.append(self.joiner)
            op.fragments(out)
        out.append(")")

    def prefix_labels(self, prefix: str) -> None:
        for op in self.operands:
            op.prefix_labels(prefix)


class Selector:
    """A parsed selector; ``str()`` is Calico's canonical form."""

    def __init__(self, root: Node) -> None:
        self.root = root

    def prefix_labels(self, prefix: str) -> None:
        self.root.prefix_labels(prefix)

    def __str__(self) -> str:
        out: list[str] = []
        self.root.fragments(out)
        return "".join(out)


# --------------------------------------------------------------------------------------------
# Parser

_LABEL_OPS = {EQ: " == ", NE: " != ", CONTAINS: " contains ", STARTS_WITH: " starts with ",
              ENDS_WITH: " ends with "}


def parse(selector: str) -> Selector:
    """Parse ``selector``; raise :class:`SelectorError` if Calico would refuse it."""
    tokens = tokenize(selector)
    if tokens[0][0] == EOF:
        return Selector(All())
    node, pos = _parse_or(tokens, 0)
    if pos != len(tokens) - 1:
        raise SelectorError(f"unexpected content at end of selector {tokens[pos:]}")
    return Selector(node)


def validate(selector: str) -> bool:
    try:
        parse(selector)
    except SelectorError:
        return False
    return True


def _parse_or(tokens: list[Token], pos: int) -> tuple[Node, int]:
    node, pos = _parse_and(tokens, pos)
    nodes = [node]
    while tokens[pos][0] == OR:
        node, pos = _parse_and(tokens, pos + 1)
        nodes.append(node)
    return (nodes[0] if len(nodes) == 1 else Group(" || ", nodes)), pos


def _parse_and(tokens: list[Token], pos: int) -> tuple[Node, int]:
    node, pos = _parse_operation(tokens, pos)
    nodes = [node]
    while tokens[pos][0] == AND:
        node, pos = _parse_operation(tokens, pos + 1)
        nodes.append(node)
    return (nodes[0] if len(nodes) == 1 else Group(" && ", nodes)), pos


def _parse_operation(tokens: list[Token], pos: int) -> tuple[Node, int]:
    negated = False
    while tokens[pos][0] == NOT:
        negated = not negated
        pos += 1
    kind, value = tokens[pos]
    node: Node
    if kind == HAS:
        node, pos = Has(value), pos + 1
    elif kind == ALL:
        node, pos = All(), pos + 1
    elif kind == GLOBAL:
        node, pos = Global(), pos + 1
    elif kind == LABEL:
        if len(tokens) - pos < 3:
            raise SelectorError("unexpected end of string looking for op")
        op = tokens[pos + 1][0]
        if op in _LABEL_OPS:
            if tokens[pos + 2][0] != STRING:
                raise SelectorError("expected string")
            node, pos = LabelOp(value, _LABEL_OPS[op], tokens[pos + 2][1]), pos + 3
        elif op in (IN, NOT_IN):
            if tokens[pos + 2][0] != LBRACE:
                raise SelectorError("expected set literal")
            p = pos + 3
            values: list[str] = []
            while tokens[p][0] == STRING:
                values.append(tokens[p][1])
                p += 1
                if tokens[p][0] == COMMA:
                    p += 1
                else:
                    break
            if tokens[p][0] != RBRACE:
                raise SelectorError("expected }")
            # Sorted bytewise and de-duplicated (code-point order is UTF-8 byte order).
            node, pos = LabelInSet(value, op == NOT_IN, sorted(set(values))), p + 1
        else:
            raise SelectorError(f"expected == or != not: {tokens[pos + 1]}")
    elif kind == LPAREN:
        node, pos = _parse_or(tokens, pos + 1)
        if tokens[pos][0] != RPAREN:
            raise SelectorError("expected )")
        pos += 1
    else:
        raise SelectorError(f"unexpected token: {tokens[pos]}")
    return (Not(node) if negated else node), pos


def prefixed(selector: str, prefix: str) -> str:
    """``parseSelectorAttachPrefix``: the canonical form with ``prefix`` on every label, or
    ``""`` if the selector does not parse (Calico logs and carries on)."""
    try:
        sel = parse(selector)
    except SelectorError:
        return ""
    sel.prefix_labels(prefix)
    return str(sel)


def canonical(selector: str) -> str:
    """The canonical (re-printed) form; raises :class:`SelectorError`."""
    return str(parse(selector))
