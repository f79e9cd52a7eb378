"""A hash tree over one syncer's key space, and the exchange that repairs a client's copy
from it (pure: no I/O, no clock, no event loop).

The tree has a fixed shape that every replica and every client shares, so two holders of
the same content have the same hashes no matter in which order they got it:

* a key's *position* is the top :data:`BUCKET_BITS` bits of a 64-bit hash of its path, so
  the tree is keyed by key path and balanced whatever the paths look like;
* a *leaf hash* covers the key, its value bytes and its revision;
* every node is ``FANOUT``-ary and holds the sum (mod 2**64) of the leaf hashes below it, so
  a key change updates one node per level (``DEPTH + 1`` additions) and no node is ever
  recomputed from its children.

Node ids are heap-style: the root is 0, the children of node ``n`` at depth ``d`` are
numbered level by level (:func:`node_id`).  The sums are change detectors, not
signatures: a client or replica that holds different content is found with probability
1 - 2**-64 per compared node; a datastore writer who could craft collisions could change
the content anyway.

:class:`DigestExchange` is the server's side of a resume by digest: starting from the
client's root hash it asks for the child hashes of the nodes that differ, and, once a node
holds few keys on the server (or is a bucket), for the client's leaves under it; then for
the paths of the keys the client has and the server does not.  Its outcome is the keys to
send (updates) and the keys to delete.  Work is counted in compared hashes and leaves and
bounded by a budget: past it the exchange gives up and the server sends a snapshot.
:func:`answer` is the client's side.
"""

from __future__ import annotations

__sans_io__ = True

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from hashlib import blake2b

FANOUT_BITS = 4
FANOUT = 1 << FANOUT_BITS
DEPTH = 3
BUCKET_BITS = FANOUT_BITS * DEPTH
BUCKETS = 1 << BUCKET_BITS
MASK = (1 << 64) - 1

#: First node id of each depth (the root is depth 0).
LEVEL_START: tuple[int, ...] = tuple(sum(FANOUT ** i for i in range(d)) for d in range(DEPTH + 2))
NODES = LEVEL_START[DEPTH + 1]

#: A node with at most this many keys on the server is compared leaf by leaf.
LEAF_LIMIT = 4

_PAIR = struct.Struct(">QQ")
_SUMS = struct.Struct(f">{FANOUT}Q")


class DigestError(ValueError):
    """The peer's digest message does not answer what was asked (the session ends)."""


def key_hash(key: str) -> int:
    return int.from_bytes(blake2b(key.encode(), digest_size=8).digest(), "big")


def leaf_hash(key: str, value: bytes, revision: str) -> int:
    h = blake2b(digest_size=8)
    h.update(key.encode())
    h.update(b"\0")
    h.update(value)
    h.update(b"\0")
    h.update(revision.encode())
    return int.from_bytes(h.digest(), "big")


def node_id(depth: int, index: int) -> int:
    return LEVEL_START[depth] + index


def depth_of(node: int) -> int:
    if not 0 <= node < NODES:
        raise DigestError(f"node {node} is not in the tree (0..{NODES - 1})")
    depth = 0
    while LEVEL_START[depth + 1] <= node:
        depth += 1
    return depth


def bucket_range(node: int) -> range:
    """The buckets (deepest nodes' indices) under ``node``."""
    depth = depth_of(node)
    width = FANOUT ** (DEPTH - depth)
    first = (node - LEVEL_START[depth]) * width
    return range(first, first + width)


def children(node: int) -> range:
    depth = depth_of(node)
    if depth == DEPTH:
        raise DigestError(f"node {node} is a bucket: it has no children")
    first = LEVEL_START[depth + 1] + (node - LEVEL_START[depth]) * FANOUT
    return range(first, first + FANOUT)


class KeyTree:
    """The hash tree of a key/value map, kept in step with it one key change at a time."""

    __slots__ = ("_sums", "_counts", "_buckets")

    def __init__(self) -> None:
        self._sums = [0] * NODES
        self._counts = [0] * NODES
        # bucket -> key hash -> (key, leaf hash)
        self._buckets: list[dict[int, tuple[str, int]] | None] = [None] * BUCKETS

    @property
    def root(self) -> int:
        return self._sums[0]

    def __len__(self) -> int:
        return self._counts[0]

    def sum(self, node: int) -> int:
        return self._sums[node]

    def count(self, node: int) -> int:
        return self._counts[node]

    def put(self, key: str, value: bytes | None, revision: str) -> None:
        """Record ``key``'s current value (``None`` or empty: it is gone)."""
        kh = key_hash(key)
        bucket = kh >> (64 - BUCKET_BITS)
        leaves = self._buckets[bucket]
        old = leaves.get(kh) if leaves is not None else None
        if value:
            new = leaf_hash(key, value, revision)
            if old is not None and old[1] == new:
                return
            if leaves is None:
                leaves = self._buckets[bucket] = {}
            leaves[kh] = (key, new)
            delta, dcount = new - (old[1] if old is not None else 0), int(old is None)
        else:
            if old is None or leaves is None:
                return
            del leaves[kh]
            delta, dcount = -old[1], -1
        sums, counts = self._sums, self._counts
        index = bucket
        for depth in range(DEPTH, -1, -1):
            n = LEVEL_START[depth] + index
            sums[n] = (sums[n] + delta) & MASK
            counts[n] += dcount
            index >>= FANOUT_BITS

    def update(self, updates: Iterable[tuple[str, bytes | None, str]]) -> None:
        for key, value, revision in updates:
            self.put(key, value, revision)

    def child_sums(self, node: int) -> bytes:
        """The sums of ``node``'s children, packed as the wire carries them."""
        first = children(node).start
        return _SUMS.pack(*self._sums[first:first + FANOUT])

    def leaves(self, node: int) -> Iterator[tuple[int, str, int]]:
        """(key hash, key, leaf hash) of every key under ``node``."""
        buckets = self._buckets
        for b in bucket_range(node):
            leaves = buckets[b]
            if leaves:
                for kh, (key, lh) in leaves.items():
                    yield kh, key, lh

    def key_of(self, kh: int) -> str | None:
        leaves = self._buckets[kh >> (64 - BUCKET_BITS)]
        entry = leaves.get(kh) if leaves is not None else None
        return entry[0] if entry is not None else None


def in_node(kh: int, node: int) -> bool:
    return (kh >> (64 - BUCKET_BITS)) in bucket_range(node)


# ---- the exchange -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Query:
    """What the server asks next: the child sums of ``nodes``, every leaf under
    ``leaves``, the paths of the keys hashed ``names``."""

    nodes: tuple[int, ...] = ()
    leaves: tuple[int, ...] = ()
    names: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Answer:
    """The client's reply to a :class:`Query`, in its order: ``FANOUT`` packed sums per
    node, packed (key hash, leaf hash) pairs per leaf node, one path per name."""

    sums: bytes = b""
    leaves: tuple[bytes, ...] = ()
    names: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return len(self.sums) + sum(map(len, self.leaves)) + sum(len(n) for n in self.names)


@dataclass(frozen=True, slots=True)
class Outcome:
    """How the exchange ended: ``send`` and ``delete`` repair the client exactly, unless
    ``over_budget`` (the server sends a snapshot instead)."""

    send: tuple[str, ...] = ()
    delete: tuple[str, ...] = ()
    over_budget: bool = False
    work: int = 0
    rounds: int = 0


def pack_leaves(pairs: Iterable[tuple[int, int]]) -> bytes:
    return b"".join(_PAIR.pack(kh, lh) for kh, lh in pairs)


def unpack_leaves(data: bytes) -> Iterator[tuple[int, int]]:
    if len(data) % _PAIR.size:
        raise DigestError(f"leaf list of {len(data)} bytes is not whole (key hash, hash) pairs")
    return _PAIR.iter_unpack(data)


def answer(tree: KeyTree, query: Query) -> Answer:
    """The client's answer to ``query`` from its own tree."""
    names = []
    for kh in query.names:
        key = tree.key_of(kh)
        if key is None:
            raise DigestError(f"server asked for the path of key hash {kh:#x}, not held here")
        names.append(key)
    return Answer(
        sums=b"".join(tree.child_sums(n) for n in query.nodes),
        leaves=tuple(pack_leaves((kh, lh) for kh, _, lh in tree.leaves(n))
                     for n in query.leaves),
        names=tuple(names))


@dataclass(slots=True)
class DigestExchange:
    """The server's side of one resume by digest, against ``tree`` as it is when each answer
    arrives (the session replays what is published meanwhile, so a key that changes during
    the exchange still ends right)."""

    tree: KeyTree
    client_root: int
    budget: int
    work: int = 0
    rounds: int = 0
    _asked: Query = field(default_factory=Query)
    _send: set[str] = field(default_factory=set)
    _delete: list[str] = field(default_factory=list)

    def begin(self) -> Query | Outcome:
        if self.tree.root == self.client_root:
            return self._done()
        return self._next([0], [])

    def receive(self, ans: Answer) -> Query | Outcome:
        """Compare ``ans`` with the tree; raise :class:`DigestError` if it does not answer
        the last query."""
        asked = self._asked
        self._asked = Query()
        if len(ans.sums) != _SUMS.size * len(asked.nodes):
            raise DigestError(f"{len(ans.sums)} bytes of sums for {len(asked.nodes)} nodes "
                              f"(expected {_SUMS.size * len(asked.nodes)})")
        if len(ans.leaves) != len(asked.leaves):
            raise DigestError(f"{len(ans.leaves)} leaf lists for {len(asked.leaves)} nodes")
        if len(ans.names) != len(asked.names):
            raise DigestError(f"{len(ans.names)} paths for {len(asked.names)} key hashes")
        tree = self.tree
        differing: list[int] = []
        for i, node in enumerate(asked.nodes):
            sums = _SUMS.unpack_from(ans.sums, i * _SUMS.size)
            self.work += FANOUT
            for child, sum_ in zip(children(node), sums, strict=True):
                if tree.sum(child) != sum_:
                    differing.append(child)
        unknown: list[int] = []
        for node, packed in zip(asked.leaves, ans.leaves, strict=True):
            theirs: dict[int, int] = {}
            for kh, lh in unpack_leaves(packed):
                if not in_node(kh, node):
                    raise DigestError(f"key hash {kh:#x} is not under node {node}")
                theirs[kh] = lh
            self.work += len(theirs) + tree.count(node)
            if self.work > self.budget:
                return self._done(over_budget=True)
            for kh, key, lh in tree.leaves(node):
                if theirs.pop(kh, None) != lh:
                    self._send.add(key)
            unknown.extend(theirs)
        for kh, name in zip(asked.names, ans.names, strict=True):
            if key_hash(name) != kh:
                raise DigestError(f"path {name[:80]!r} does not hash to {kh:#x}")
            self._delete.append(name)
        return self._next(differing, unknown)

    def _next(self, differing: Sequence[int], unknown: Sequence[int]) -> Query | Outcome:
        if self.work > self.budget:
            return self._done(over_budget=True)
        nodes, leaves = [], []
        tree = self.tree
        for node in differing:
            if node >= LEVEL_START[DEPTH] or tree.count(node) <= LEAF_LIMIT:
                leaves.append(node)
            else:
                nodes.append(node)
        if not (nodes or leaves or unknown):
            return self._done()
        self.rounds += 1
        self._asked = Query(tuple(nodes), tuple(leaves), tuple(unknown))
        return self._asked

    def _done(self, *, over_budget: bool = False) -> Outcome:
        if over_budget:
            return Outcome(over_budget=True, work=self.work, rounds=self.rounds)
        return Outcome(tuple(sorted(self._send)), tuple(sorted(self._delete)),
                       work=self.work, rounds=self.rounds)


def tree_of(items: Iterable[tuple[str, bytes | None, str]]) -> KeyTree:
    tree = KeyTree()
    tree.update(items)
    return tree
