"""QA metrics of BRINK (Sec. 4.3) after the output processing of Alg. 3 (App. E), and the permissive
substring variants of App. I. Pure Python: a question set is at most tens of thousands of records.

Output processing (Alg. 3): ``split`` then ``norm``. For entity schemes whose names contain no spaces
or punctuation (``private_id``, ``entity_id``) ``split`` cuts a raw output at newlines, commas,
semicolons, ``|`` and whitespace ("12, 7 9" is three answers); for ``text_label`` only at newlines, since
labels hold spaces and commas ("Washington, D.C."). A prediction given as a JSON list is taken as the
list ``P`` (no split), the unambiguous form for text labels. ``norm`` lower-cases, removes the token
``<pad>``, punctuation, the articles a/an/the and extra whitespace; empty results are dropped from P.
A gold answer (or hard answer) that normalises to nothing (a label such as "The") is kept as its
lower-cased, stripped text instead, so it can still be matched. P = {norm(p)}, A = {norm(a)}.

Per question (Sec. 4.3): hit = [P & A != {}]; precision = |P & A| / |P| (0 when P is empty: an empty
prediction predicts nothing correct); recall = |P & A| / |A|; F1 = 2 |P & A| / (|P| + |A|);
hard = [norm(a_q) in P]. Each is averaged over all questions. HHR = Hits@Hard / Hits@Any, reported as
None (not NaN) when Hits@Any = 0.

Permissive variants (App. I; the RoG evaluation script the paper criticises, labelled ``permissive_*``):
a gold answer counts as predicted when its normalised form is a *substring* of the normalised output
joined with spaces. permissive Hits@1 = [some gold answer matches]; matched = number of gold answers
that match; permissive precision = min(1, matched / |P|) (RoG divides by the number of raw prediction
lines and can exceed 1; we cap it), recall = matched / |A|, F1 = their harmonic mean (0 if both are 0).
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass

SPACE_FREE_SCHEMES = ("private_id", "entity_id")
_PUNCTUATION = re.compile(f"[{re.escape(string.punctuation)}]")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SEPARATORS = re.compile(r"[\n,;|]")
METRICS = ("hits_at_any", "precision", "recall", "f1", "hits_at_hard", "hhr")
PERMISSIVE_METRICS = ("permissive_hits_at_1", "permissive_precision", "permissive_recall", "permissive_f1")


def norm(text: str) -> str:
    """Alg. 3's norm: lower case, no ``<pad>``, punctuation, articles or extra whitespace."""
    text = text.lower().replace("<pad>", " ")
    text = _PUNCTUATION.sub("", text)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def split_output(raw: str | list, scheme: str) -> list[str]:
    """Alg. 3's split of one raw model output into answer strings (module docstring)."""
    if isinstance(raw, list):
        return [str(p) for p in raw]
    if scheme in SPACE_FREE_SCHEMES:
        return [word for part in _SEPARATORS.split(raw) for word in part.split()]
    return raw.split("\n")


def gold_form(answer: str) -> str:
    """``norm(answer)``, or the lower-cased stripped answer when normalisation leaves nothing."""
    return norm(answer) or answer.lower().strip()


@dataclass(frozen=True)
class QuestionScore:
    hit: float
    precision: float
    recall: float
    f1: float
    hard: float
    permissive_hit: float
    permissive_precision: float
    permissive_recall: float
    permissive_f1: float


def score_question(raw: str | list, answers: list[str], hard_answer: str, scheme: str) -> QuestionScore:
    """Every per-question term of Sec. 4.3 and App. I for one raw output against its gold answers."""
    raw_parts = split_output(raw, scheme)
    gold = {a for a in (gold_form(x) for x in answers) if a}
    if not gold:
        raise ValueError(f"question has no non-empty gold answer: {answers!r}")
    predicted = {p for p in (norm(x) for x in raw_parts) if p}
    # an output that normalises to nothing counts only where it equals such a kept gold form ("the")
    predicted |= {x.lower().strip() for x in raw_parts if not norm(x) and x.lower().strip() in gold}
    common = len(predicted & gold)
    joined = norm(" ".join(raw_parts))
    matched = sum(1 for a in gold if a in joined) if joined else 0
    lines = len([p for p in raw_parts if p.strip()])
    p_precision = min(1.0, matched / lines) if lines else 0.0
    p_recall = matched / len(gold)
    return QuestionScore(
        hit=float(common > 0),
        precision=common / len(predicted) if predicted else 0.0,
        recall=common / len(gold),
        f1=2 * common / (len(predicted) + len(gold)),
        hard=float(gold_form(hard_answer) in predicted),
        permissive_hit=float(matched > 0),
        permissive_precision=p_precision,
        permissive_recall=p_recall,
        permissive_f1=2 * p_precision * p_recall / (p_precision + p_recall) if p_precision + p_recall else 0.0,
    )


def aggregate(scores: list[QuestionScore]) -> dict[str, float | None]:
    """Averages over questions, HHR, and the permissive variants; ``questions`` = |Q|."""
    if not scores:
        raise ValueError("no questions to evaluate")
    n = len(scores)

    def mean(field: str) -> float:
        return sum(getattr(s, field) for s in scores) / n

    hits_any, hits_hard = mean("hit"), mean("hard")
    return {
        "questions": n,
        "hits_at_any": hits_any,
        "precision": mean("precision"),
        "recall": mean("recall"),
        "f1": mean("f1"),
        "hits_at_hard": hits_hard,
        "hhr": hits_hard / hits_any if hits_any > 0 else None,
        "permissive_hits_at_1": mean("permissive_hit"),
        "permissive_precision": mean("permissive_precision"),
        "permissive_recall": mean("permissive_recall"),
        "permissive_f1": mean("permissive_f1"),
    }
