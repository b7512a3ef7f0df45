"""Answer-subgraph validation and isomorphism type (paper 002 Sec. 3, App. A.2, A.4; spec 2.B), in plain
Python: no Spark, so the same code runs in tests, in a pandas UDF over the per-question arrays and in the
procedural generator.

An answer subgraph G is a set of triples ``(h, r, t)`` (or ``(u, v)`` pairs) over node ids; the question
names its seeds S and its answer a. G is *valid* when it has at most ``max_edges`` triples, a is not a seed,
every seed and a are nodes of G, and G (direction dropped) is a tree without parallel edges whose leaves,
rooted at a, are exactly seeds (every seed a leaf, every leaf a seed). :func:`invalid_reason` names the
first failed check in the spec's order (:data:`REASONS`).

The type identifier (App. A.2) is the spec's canonical token encoding: from the root a, each child starts a
chain that runs while a node has exactly one child; a chain of ``n`` edges ending in a leaf is ``(n)``; one
ending in a branching node is ``(`` + n (omitted when 1) + its children's tokens + ``)``; siblings are
ordered bigger first: more edges, then more leaves, then the text in descending character order (this
makes the order total, so the identifier is canonical; the text determines the subtree, so it is
one-to-one). ``n_hops`` is the eccentricity of a in G.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cmp_to_key

REASONS = (
    "too_many_edges",
    "answer_is_seed",
    "seed_not_in_graph",
    "answer_not_in_graph",
    "parallel_edges",
    "disconnected",
    "cycle",
    "non_seed_leaf",
    "seed_not_leaf",
)
DEFAULT_MAX_EDGES = 6

# Table A1 (spec 2.B): identifier -> (Dutt et al. 2023 label or None for N/A, n_hops, edges, seeds).
TABLE_A1: dict[str, tuple[str | None, int, int, int]] = {
    "(1)": ("Iso-0", 1, 1, 1),
    "(2)": ("Iso-1", 2, 2, 1),
    "(1)(1)": ("Iso-2", 1, 2, 2),
    "(2)(1)": ("Iso-3", 2, 3, 2),
    "((1)(1))": ("Iso-4", 2, 3, 2),
    "(3)": ("Iso-5", 3, 3, 1),
    "(2)(2)": ("Iso-6", 2, 4, 2),
    "(3)(1)": ("Iso-7", 3, 4, 2),
    "((2)(1))": ("Iso-8", 3, 4, 2),
    "((1)(1))(1)": ("Iso-9", 2, 4, 3),
    "(2(1)(1))": ("Iso-10", 3, 4, 2),
    "(1)(1)(1)": ("Iso-11", 1, 3, 3),
    "((1)(1)(1))": ("Iso-12", 2, 4, 3),
    "(2)(2)(1)": ("Iso-13", 2, 5, 3),
    "((3)(1))": ("Iso-14", 4, 5, 2),
    "(4)(1)": ("Iso-15", 4, 5, 2),
    "(4)": ("Iso-16", 4, 4, 1),
    "((1)(1))(2)": ("Iso-17", 2, 5, 3),
    "(2)(1)(1)": ("Iso-18", 2, 4, 3),
    "((2)(1)(1))": ("Iso-19", 3, 5, 3),
    "((1)(1))(1)(1)": ("Iso-22", 2, 5, 4),
    "((2)(1))(1)": ("Iso-23", 3, 5, 3),
    "((1)(1)(1))(1)": ("Iso-25", 2, 5, 4),
    "((1)(1)(1))(2)": ("Iso-26", 2, 6, 4),
    "(1)(1)(1)(1)": (None, 1, 4, 4),
    "(1)(1)(1)(1)(1)": (None, 1, 5, 5),
    "(5)": (None, 5, 5, 1),
}


def dutt_label(identifier: str) -> str | None:
    """The Dutt et al. (2023) label Table A1 gives the type (None: N/A or not in Table A1)."""
    entry = TABLE_A1.get(identifier)
    return entry[0] if entry else None


@dataclass(frozen=True)
class AnswerType:
    graph_isomorphism: str
    dutt_label: str | None
    n_hops: int
    n_edges: int
    n_seeds: int
    n_intermediate: int


@dataclass(frozen=True)
class Verdict:
    """The classification of one answer subgraph: ``type`` when valid, else ``reason`` and ``detail``."""

    type: AnswerType | None
    reason: str | None = None
    detail: str | None = None

    @property
    def valid(self) -> bool:
        return self.type is not None


@dataclass(frozen=True)
class _Token:
    edges: int
    leaves: int
    text: str


def _compare(a: _Token, b: _Token) -> int:
    """Bigger subtree first: more edges, more leaves, then the text in descending character order."""
    ka, kb = (-a.edges, -a.leaves), (-b.edges, -b.leaves)
    if ka != kb:
        return -1 if ka < kb else 1
    if a.text != b.text:
        return -1 if a.text > b.text else 1
    return 0


_ORDER = cmp_to_key(_compare)


def _endpoints(edge: Sequence) -> tuple:
    if len(edge) == 3:
        return edge[0], edge[2]
    if len(edge) == 2:
        return edge[0], edge[1]
    raise ValueError(f"an edge is (h, r, t) or (u, v), got {edge!r}")


def _children(root, adjacency: dict) -> dict:
    """Child lists of the tree rooted at ``root`` (BFS over ``adjacency``)."""
    children = {root: []}
    queue = [root]
    for node in queue:
        for nbr in adjacency[node]:
            if nbr not in children:
                children[node].append(nbr)
                children[nbr] = []
                queue.append(nbr)
    return children


def _token(start, children: dict) -> _Token:
    length, x = 1, start
    while len(children[x]) == 1:
        x = children[x][0]
        length += 1
    if not children[x]:
        return _Token(length, 1, f"({length})")
    subs = sorted((_token(y, children) for y in children[x]), key=_ORDER)
    text = "(" + (str(length) if length > 1 else "") + "".join(s.text for s in subs) + ")"
    return _Token(length + sum(s.edges for s in subs), sum(s.leaves for s in subs), text)


def rooted_identifier(root, children: dict) -> str:
    """The identifier of a tree given as child lists from ``root`` (every node has an entry)."""
    return "".join(t.text for t in sorted((_token(c, children) for c in children[root]), key=_ORDER))


def _depth(root, children: dict) -> int:
    best, stack = 0, [(root, 0)]
    while stack:
        node, d = stack.pop()
        best = max(best, d)
        stack.extend((c, d + 1) for c in children[node])
    return best


def classify(seeds: Iterable, answer, edges: Iterable[Sequence], max_edges: int = DEFAULT_MAX_EDGES) -> Verdict:
    """Validate the answer subgraph ``edges`` of a question with ``seeds`` and ``answer`` and, when valid,
    give its type. Repeated identical edges count once (G is a set); seeds are a set."""
    seed_set = set(seeds)
    edge_list = list(dict.fromkeys(tuple(e) for e in edges))
    if len(edge_list) > max_edges:
        return Verdict(None, "too_many_edges", f"{len(edge_list)} edges > {max_edges}")
    if answer in seed_set:
        return Verdict(None, "answer_is_seed", f"the answer {answer} is a seed")
    pairs = [_endpoints(e) for e in edge_list]
    nodes = {n for p in pairs for n in p}
    missing = sorted((s for s in seed_set if s not in nodes), key=repr)
    if missing:
        return Verdict(None, "seed_not_in_graph", f"seed(s) {', '.join(map(str, missing))} on no edge")
    if answer not in nodes:
        return Verdict(None, "answer_not_in_graph", f"the answer {answer} is on no edge")
    undirected: dict = {}
    for u, v in pairs:
        key = frozenset((u, v))
        if key in undirected:
            return Verdict(None, "parallel_edges", f"two edges join {u} and {v}")
        undirected[key] = (u, v)
    adjacency: dict = {n: [] for n in nodes}
    for u, v in pairs:
        adjacency[u].append(v)
        if u != v:
            adjacency[v].append(u)
    for n in adjacency:
        adjacency[n].sort(key=repr)
    children = _children(answer, adjacency)
    if len(children) != len(nodes):
        unreached = sorted((n for n in nodes if n not in children), key=repr)
        return Verdict(None, "disconnected", f"{len(unreached)} node(s) not connected to the answer")
    if len(pairs) != len(nodes) - 1:
        return Verdict(None, "cycle", f"{len(pairs)} edges on {len(nodes)} nodes")
    leaves = sorted((n for n in nodes if n != answer and not children[n]), key=repr)
    bad_leaves = [n for n in leaves if n not in seed_set]
    if bad_leaves:
        return Verdict(None, "non_seed_leaf", f"leaf node(s) {', '.join(map(str, bad_leaves))} not seeds")
    inner = sorted((s for s in seed_set if children[s]), key=repr)
    if inner:
        return Verdict(None, "seed_not_leaf", f"seed(s) {', '.join(map(str, inner))} not leaves")
    identifier = rooted_identifier(answer, children)
    return Verdict(
        AnswerType(
            identifier,
            dutt_label(identifier),
            _depth(answer, children),
            len(pairs),
            len(seed_set),
            len(nodes) - len(seed_set) - 1,
        )
    )


def invalid_reason(
    seeds: Iterable, answer, edges: Iterable[Sequence], max_edges: int = DEFAULT_MAX_EDGES
) -> str | None:
    """The first failed check of :data:`REASONS` (None: valid)."""
    return classify(seeds, answer, edges, max_edges).reason


def identifier(seeds: Iterable, answer, edges: Iterable[Sequence], max_edges: int | None = None) -> str:
    """The type identifier of a valid answer subgraph (ValueError naming the reason otherwise)."""
    edge_list = list(edges)
    verdict = classify(seeds, answer, edge_list, len(edge_list) if max_edges is None else max_edges)
    if not verdict.valid:
        raise ValueError(f"not a valid answer subgraph: {verdict.reason} ({verdict.detail})")
    return verdict.type.graph_isomorphism


# --- identifiers back to shapes (the procedural generator's templates) ---------------------------------


@dataclass(frozen=True)
class Shape:
    """A type as a rooted tree: node 0 is the answer, node i >= 1 hangs from ``parent[i - 1] < i``; the leaves
    are the seeds, the other nodes intermediates."""

    identifier: str
    parent: tuple[int, ...]

    @property
    def n_nodes(self) -> int:
        return len(self.parent) + 1

    @property
    def n_edges(self) -> int:
        return len(self.parent)

    def children(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {i: [] for i in range(self.n_nodes)}
        for i, p in enumerate(self.parent, start=1):
            out[p].append(i)
        return out

    @property
    def seeds(self) -> tuple[int, ...]:
        kids = self.children()
        return tuple(i for i in range(1, self.n_nodes) if not kids[i])

    @property
    def depth(self) -> tuple[int, ...]:
        """Each node's distance from the answer."""
        d = [0]
        for p in self.parent:
            d.append(d[p] + 1)
        return tuple(d)

    def edges(self) -> list[tuple[int, int]]:
        """``(parent, child)`` per edge in node order."""
        return [(p, i) for i, p in enumerate(self.parent, start=1)]


def _parse_tokens(text: str, pos: int) -> tuple[list, int]:
    """Tokens from ``pos`` until a ``)`` or the end: each ``(length, subtokens)``."""
    tokens = []
    while pos < len(text) and text[pos] == "(":
        pos += 1
        digits = pos
        while pos < len(text) and text[pos].isdigit():
            pos += 1
        number = text[digits:pos]
        if number.startswith("0"):
            raise ValueError(f"bad chain length at {digits}")
        if pos < len(text) and text[pos] == ")":
            if not number:
                raise ValueError(f"empty token at {digits - 1}")
            tokens.append((int(number), []))
            pos += 1
            continue
        subs, pos = _parse_tokens(text, pos)
        if len(subs) < 2:
            raise ValueError(f"a branching token needs two or more subtokens (at {digits - 1})")
        if pos >= len(text) or text[pos] != ")":
            raise ValueError(f"unclosed token at {digits - 1}")
        tokens.append((int(number) if number else 1, subs))
        pos += 1
    return tokens, pos


def shape(identifier_text: str) -> Shape:
    """The rooted tree of a type identifier (ValueError when it is not one, or not in canonical form)."""
    text = identifier_text.strip()
    try:
        tokens, pos = _parse_tokens(text, 0)
        if pos != len(text) or not tokens:
            raise ValueError(f"unexpected {text[pos : pos + 1]!r} at {pos}" if pos < len(text) else "empty")
    except ValueError as exc:
        raise ValueError(f"{identifier_text!r} is not an isomorphism type identifier: {exc}") from None
    parent: list[int] = []
    # breadth-first numbering: (parent node, token) pairs expanded in queue order
    queue = [(0, tok) for tok in tokens]
    while queue:
        nxt = []
        for p, (length, subs) in queue:
            node = p
            for _ in range(length):
                parent.append(node)
                node = len(parent)
            nxt.extend((node, s) for s in subs)
        queue = nxt
    result = Shape(text, tuple(parent))
    canonical = rooted_identifier(0, result.children())
    if canonical != text:
        raise ValueError(f"{identifier_text!r} is not in canonical form; the canonical identifier is {canonical!r}")
    return result


def rooted_triples(answer, triples: Iterable[Sequence]) -> list[tuple]:
    """The triples ``(h, r, t)`` of a valid answer tree oriented from the answer: per triple ``(child,
    parent, r, child_is_head, depth of the child)``, in breadth-first order from the answer."""
    by_node: dict = {}
    for h, r, t in triples:
        by_node.setdefault(h, []).append((t, r, True))
        by_node.setdefault(t, []).append((h, r, False))
    out, seen, queue = [], {answer}, [(answer, 0)]
    for node, depth in queue:
        for other, r, node_is_head in sorted(by_node.get(node, []), key=repr):
            if other in seen:
                continue
            seen.add(other)
            out.append((other, node, r, not node_is_head, depth + 1))
            queue.append((other, depth + 1))
    return out
