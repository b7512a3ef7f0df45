"""QA metrics of BRINK (Sec. 4.3) after the output processing of Alg. 3 (App. E), and the permissive
substring variants of App. I. Pure Python: a question set is at most tens of thousands of records.

Output processing (Alg. 3): ``split`` then ``norm``. App. E splits a raw output "using delimiters such as
commas, spaces, or newlines as appropriate" ("Paris, London" and "Paris London" are two answers each).

- ``private_id`` and ``entity_id`` names hold no spaces or punctuation: ``split`` cuts at newlines,
  commas, semicolons, ``|`` and whitespace ("12, 7 9" is three answers).
- ``text_label`` names hold spaces and commas ("Washington, D.C."), so the cut is guided by the *known
  labels* (every name the question files give, or ``--labels``; :class:`KnownLabels`). A line (cut at
  newlines) is cut at the separators ``,`` ``;`` ``|`` into pieces, and consecutive pieces are re-joined,
  longest run first from the left, when the run with its separators is a known label ("Washington, D.C.,
  Paris" -> "Washington, D.C." and "Paris"; "Paris, London" -> two answers). A piece that is not a known
  label is then cut at whitespace when its words split entirely into known labels, into as few as possible
  (App. E's "Paris London" -> "Paris", "London"; "Barack Obama" stays whole because it is a known label);
  otherwise it stays whole, one (wrong) answer. Without known labels, text is cut at the separators and
  newlines only. Known labels compare by their gold form (below), so case, articles and punctuation do not
  matter. A question's own gold answers are always known labels; the other labels come from the whole
  question set, so keeping a comma label whole never depends on whether it is this question's answer.
- A prediction given as a JSON list is taken as the list ``P`` (no split), the unambiguous form.

``norm`` lower-cases, removes the token ``<pad>``, punctuation, the articles a/an/the and extra
whitespace; empty results are dropped from P. A gold answer (or hard answer) that normalises to nothing
(a label such as "The") is kept as its lower-cased, stripped text instead, so it can still be matched.
P = {norm(p)}, A = {norm(a)}.

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
_PIECE_SEPARATORS = re.compile(r"([,;|])")  # captured: a re-joined run keeps its separators
METRICS = ("hits_at_any", "precision", "recall", "f1", "hits_at_hard", "hhr")
PERMISSIVE_METRICS = ("permissive_hits_at_1", "permissive_precision", "permissive_recall", "permissive_f1")


def norm(text: str) -> str:
    """Alg. 3's norm: lower case, no ``<pad>``, punctuation, articles or extra whitespace."""
    text = text.lower().replace("<pad>", " ")
    text = _PUNCTUATION.sub("", text)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def gold_form(answer: str) -> str:
    """``norm(answer)``, or the lower-cased stripped answer when normalisation leaves nothing."""
    return norm(answer) or answer.lower().strip()


class KnownLabels:
    """The entity labels a ``text_label`` split may keep whole, compared by :func:`gold_form`."""

    def __init__(self, labels=()):
        self.forms: set[str] = set()
        self.max_pieces = 1  # separator-delimited pieces of the longest known label
        self.max_words = 1
        self.add(labels)

    def add(self, labels) -> KnownLabels:
        for label in labels:
            form = gold_form(label)
            if form:
                self.forms.add(form)
                self.max_pieces = max(self.max_pieces, (len(_PIECE_SEPARATORS.split(label)) + 1) // 2)
                self.max_words = max(self.max_words, len(label.split()))
        return self

    def __contains__(self, text: str) -> bool:
        form = gold_form(text)
        return bool(form) and form in self.forms

    def __len__(self) -> int:
        return len(self.forms)


def split_output(raw: str | list, scheme: str, labels: KnownLabels | None = None) -> list[str]:
    """Alg. 3's split of one raw model output into answer strings (module docstring); ``labels``: the known
    labels of a ``text_label`` split."""
    if isinstance(raw, list):
        return [str(p) for p in raw]
    if scheme in SPACE_FREE_SCHEMES:
        return [word for part in _SEPARATORS.split(raw) for word in part.split()]
    known = labels if labels is not None else KnownLabels()
    out = []
    for line in raw.split("\n"):
        for piece in _join_known_pieces(_PIECE_SEPARATORS.split(line), known):
            out.extend(_segment_words(piece, known))
    return [p for p in out if p.strip()]


def _join_known_pieces(parts: list[str], known: KnownLabels) -> list[str]:
    """``parts`` alternate piece, separator, piece, ...; from the left, the longest run of pieces that is
    a known label (separators included) becomes one piece, else the piece stands alone."""
    pieces, separators = parts[0::2], parts[1::2]
    out, i = [], 0
    while i < len(pieces):
        taken = i
        for j in range(min(len(pieces), i + known.max_pieces) - 1, i, -1):
            run = pieces[i] + "".join(separators[k] + pieces[k + 1] for k in range(i, j))
            if run in known:
                taken = j
                break
        out.append(pieces[i] + "".join(separators[k] + pieces[k + 1] for k in range(i, taken)))
        i = taken + 1
    return [p.strip() for p in out]


def _segment_words(piece: str, known: KnownLabels) -> list[str]:
    """``piece`` whole when it is a known label or cannot be covered by known labels; else its words
    split into the fewest known labels (ties: the longest first label)."""
    words = piece.split()
    if len(words) < 2 or piece in known:
        return [piece]
    n = len(words)
    best: list[list[str] | None] = [None] * n + [[]]  # best[i]: fewest labels covering words[i:]
    for i in range(n - 1, -1, -1):
        for j in range(min(n, i + known.max_words), i, -1):
            rest = best[j]
            candidate = " ".join(words[i:j])
            if rest is not None and candidate in known:
                if best[i] is None or len(rest) + 1 < len(best[i]):
                    best[i] = [candidate, *rest]
    return best[0] if best[0] is not None else [piece]


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


def score_question(
    raw: str | list, answers: list[str], hard_answer: str, scheme: str, labels: KnownLabels | None = None
) -> QuestionScore:
    """Every per-question term of Sec. 4.3 and App. I for one raw output against its gold answers;
    ``labels``: the question set's known labels (``text_label``), to which the question's own answers are
    added."""
    if scheme not in SPACE_FREE_SCHEMES and not isinstance(raw, list):
        own = [*answers, hard_answer]
        labels = KnownLabels(own) if labels is None else _with(labels, own)
    raw_parts = split_output(raw, scheme, labels)
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


def _with(labels: KnownLabels, extra: list[str]) -> KnownLabels:
    """``labels`` plus ``extra``, sharing ``labels``' set when ``extra`` adds nothing (the usual case)."""
    missing = [x for x in extra if x not in labels]
    if not missing:
        return labels
    merged = KnownLabels()
    merged.forms, merged.max_pieces, merged.max_words = set(labels.forms), labels.max_pieces, labels.max_words
    return merged.add(missing)


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
