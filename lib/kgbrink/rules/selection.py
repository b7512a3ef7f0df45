"""AMIE3's acceptance of mined rules (Lajus et al. 2020; ``testConfidenceThresholds``), run on the driver.

From the closed candidate rules with their metrics (every closed rule whose support passes the
head-coverage threshold), a rule is output when AMIE's breadth-first refinement reaches it (AMIE does not
refine "perfect" rules, PCA confidence 1), it passes the confidence thresholds, and its PCA confidence is
strictly above that of every ancestor (:func:`amie_selection`). AMIE computes a rule's PCA confidence only
once its standard confidence reaches ``-minc``; below it the PCA confidence stays unset (0), so such a rule
is never "perfect" and never prunes a refinement (:func:`_confident`). The candidates are small data
(rules with their metrics), so this is plain Python.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from kgbrink.rules.model import Atom, Rule

if TYPE_CHECKING:
    from kgbrink.rules.params import MiningParams


def _sub_bodies(rule: Rule) -> list[tuple[Atom, ...]]:
    """Proper non-empty subsets of the body that form a valid rule with the same head."""
    out = []
    for n in range(1, len(rule.body)):
        for subset in itertools.combinations(rule.body, n):
            if _valid(rule.head, subset):
                out.append(subset)
    return out


def _valid(head: Atom, body: tuple[Atom, ...]) -> bool:
    try:
        Rule(head, body)
    except ValueError:
        return False
    return True


def _confident(rule: Rule, min_std_confidence: float) -> bool:
    """Whether AMIE computes the rule's PCA confidence: only when its standard confidence (support / body
    size) reaches ``-minc``; otherwise the PCA confidence stays 0, so the rule is neither perfect nor an
    ancestor that prunes (a rule below ``-minc`` with a PCA confidence of 0.909 does not prune a child at
    0.909; issue 27, PROBE umls)."""
    m = rule.metrics
    return bool(m.get("body_size")) and m["support"] / m["body_size"] >= min_std_confidence


def _is_perfect(rule: Rule, min_std_confidence: float) -> bool:
    """PCA confidence 1 (support = PCA body size), as far as AMIE computed it (:func:`_confident`)."""
    m = rule.metrics
    return (
        m.get("pca_body_size") is not None
        and m["pca_body_size"] > 0
        and m["support"] == m["pca_body_size"]
        and _confident(rule, min_std_confidence)
    )


def _reachable(rule: Rule, closed: dict[str, Rule], memo: dict[tuple, bool], min_std_confidence: float) -> bool:
    """Some order of adding the body atoms keeps every prefix connected to the head and never passes a
    closed intermediate rule that is perfect (AMIE does not refine those)."""

    def search(prefix: frozenset) -> bool:
        if prefix in memo:
            return memo[prefix]
        if len(prefix) == len(rule.body):
            return True
        ok = False
        if prefix:
            sub = tuple(sorted(prefix))
            if _valid(rule.head, sub):
                known = closed.get(Rule(rule.head, sub).key())
                if known is not None and _is_perfect(known, min_std_confidence):
                    memo[prefix] = False
                    return False
        linked = set(rule.head.variables()) | {v for a in prefix for v in a.variables()}
        for atom in rule.body:
            if atom not in prefix and set(atom.variables()) & linked and search(prefix | {atom}):
                ok = True
                break
        memo[prefix] = ok
        return ok

    return search(frozenset())


def amie_selection(candidates: list[Rule], params: MiningParams) -> list[Rule]:
    """AMIE3's output from the closed candidate rules (metrics attached; every closed rule with support
    >= the head-coverage threshold must be present), breadth-first by length. A rule is output when it is
    reachable, std confidence >= min_std_confidence, PCA confidence >= min_pca_confidence, and its PCA
    confidence is strictly above that of each of its ancestors (AMIE3 ``testConfidenceThresholds``):
    the closed rules it is refined from (one atom fewer, refined by AMIE: reachable, not perfect, shorter
    than max_atoms; output or not), and the output rules with the same head and a subset of its body.
    A closed parent counts only when its standard confidence reaches ``min_std_confidence``: AMIE leaves
    the PCA confidence of the others unset (0), so they never prune (:func:`_confident`).
    AMIE3 keeps the parent of the path that first reached a rule; kgbrink counts every parent, so the
    result does not depend on the order of AMIE's threads (a choice; identical on Family)."""
    minc = params.min_std_confidence
    closed = {r.key(): r for r in candidates}
    reachable = {key: _reachable(rule, closed, {}, minc) for key, rule in closed.items()}
    kept: dict[str, Rule] = {}

    def pca_of(rule: Rule) -> float | None:
        m = rule.metrics
        return m["support"] / m["pca_body_size"] if m.get("pca_body_size") else None

    for rule in sorted(candidates, key=lambda r: (r.length, r.key())):
        m = rule.metrics
        if not m.get("body_size") or not m.get("pca_body_size") or not reachable[rule.key()]:
            continue
        std, pca = m["support"] / m["body_size"], pca_of(rule)
        if std < params.min_std_confidence or pca < params.min_pca_confidence:
            continue
        ancestors = []
        for sub in _sub_bodies(rule):
            key = Rule(rule.head, sub).key()
            if key in kept:
                ancestors.append(kept[key])
            elif (
                len(sub) == len(rule.body) - 1
                and key in closed
                and reachable[key]
                and _confident(closed[key], minc)
                and not _is_perfect(closed[key], minc)
            ):
                ancestors.append(closed[key])
        if any(pca_of(a) is not None and pca <= pca_of(a) for a in ancestors):
            continue
        kept[rule.key()] = Rule(rule.head, rule.body, {**m, "std_confidence": std, "pca_confidence": pca})
    return list(kept.values())
