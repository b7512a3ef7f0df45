"""``kgbrink evaluate-qa``: BRINK's QA metrics (:mod:`kgbrink.brink.qa_metrics`) of model predictions.

Inputs (no Spark needed):
- questions: a question JSON Lines file of a release (``questions/<scheme>/<split>.jsonl``), or several;
  each record has ``id``, ``answers`` and ``hard_answer`` named in one labelling scheme;
- predictions: JSON Lines ``{"id": ..., "prediction": "raw model output" | [answers...]}``, in the same
  scheme (``--scheme``, which decides how raw outputs are split);
- for ``text_label``, the known labels that guide the split (App. E; :mod:`kgbrink.brink.qa_metrics`): every
  answer, hard answer and topic entity of the question files, plus ``--labels``: a text file with one
  label a line, or a KG file of a release named by text labels (``kg/text_label/complete.tsv``: the
  first and third TAB-separated field of each line).

Policies: a question without a prediction line counts as an empty prediction (scored 0; counted as
``missing_predictions``). The job fails with ``file:line`` on: a line that is not UTF-8 or not a JSON
object, a record without the needed fields, an ``id`` that is not a string or an integer, a repeated id,
a prediction for an unknown id, a prediction that is neither a string, null nor a list of strings,
``answers`` that are not a non-empty list of strings, a ``hard_answer`` that is not one of the
``answers``; and on a predictions file without a prediction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kgbrink.brink import qa_metrics
from kgbrink.core.console import headline
from kgbrink.core.jobs import JobContext, arg, job
from kgbrink.core.tracking import JobSummary

# the numbers the summary prints (paper 000 Sec. 4.3); every metric is in the results
HEADLINE = {"hits_at_any": "Hits@Any", "f1": "F1", "hits_at_hard": "Hits@Hard", "hhr": "HHR"}


class QAInputError(ValueError):
    """A malformed questions or predictions file (message names file and line)."""


def _lines(path: Path):
    """``(number, text)`` of each line of ``path``, decoded as UTF-8 (:class:`QAInputError` naming the line)."""
    if not path.is_file():
        raise QAInputError(f"{path}: no such file")
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, 1):
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise QAInputError(f"{path}:{number}: not UTF-8 (byte {e.start + 1} of the line)") from None


def _records(path: Path, required: tuple[str, ...]):
    """``(number, record)`` of each non-blank line, checked as it is read: the first bad line in the file
    is the one an error names."""
    for number, line in _lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise QAInputError(f"{path}:{number}: not JSON ({e.msg})") from None
        if not isinstance(record, dict):
            raise QAInputError(f"{path}:{number}: not a JSON object")
        missing = [k for k in required if k not in record]
        if missing:
            raise QAInputError(f"{path}:{number}: missing field(s) {', '.join(missing)}")
        if type(record["id"]) not in (str, int):
            raise QAInputError(f"{path}:{number}: id {record['id']!r} is not a string or an integer")
        yield number, record


def read_questions(paths: list[Path]) -> dict[str, dict]:
    questions: dict[str, dict] = {}
    for path in paths:
        for number, record in _records(path, ("id", "answers", "hard_answer")):
            if record["id"] in questions:
                raise QAInputError(f"{path}:{number}: question id {record['id']!r} repeated")
            answers, hard = record["answers"], record["hard_answer"]
            if (
                not isinstance(answers, list)
                or not all(isinstance(a, str) for a in answers)
                or not any(a.strip() for a in answers)
            ):
                raise QAInputError(f"{path}:{number}: answers must be a list of strings, at least one non-empty")
            if not isinstance(hard, str) or hard not in answers:
                raise QAInputError(f"{path}:{number}: hard_answer {hard!r} is not one of the answers")
            questions[record["id"]] = record
    if not questions:
        raise QAInputError(f"no questions in {', '.join(map(str, paths))}")
    return questions


def read_predictions(path: Path, questions: dict[str, dict]) -> dict[str, str | list]:
    predictions: dict[str, str | list] = {}
    for number, record in _records(path, ("id", "prediction")):
        qid, raw = record["id"], record["prediction"]
        if qid not in questions:
            raise QAInputError(f"{path}:{number}: prediction for unknown question id {qid!r}")
        if qid in predictions:
            raise QAInputError(f"{path}:{number}: second prediction for question {qid!r}")
        if raw is None:
            raw = ""
        if isinstance(raw, list):
            wrong = next((i for i, item in enumerate(raw, 1) if not isinstance(item, str)), None)
            if wrong is not None:
                raise QAInputError(f"{path}:{number}: prediction item {wrong} ({raw[wrong - 1]!r}) is not a string")
        elif not isinstance(raw, str):
            raise QAInputError(f"{path}:{number}: prediction must be a string or a list of strings")
        predictions[qid] = raw
    if not predictions:
        raise QAInputError(f"{path}: no predictions (an empty file would score every question 0)")
    return predictions


def read_labels(path: Path) -> list[str]:
    """Labels of ``--labels``: one a line, or ``head<TAB>relation<TAB>tail`` lines (head and tail)."""
    labels = []
    for number, line in _lines(path):
        fields = line.rstrip("\n").split("\t")
        if len(fields) == 3:
            labels += [fields[0], fields[2]]
        elif len(fields) == 1:
            labels.append(fields[0])
        else:
            raise QAInputError(f"{path}:{number}: expected one label or head<TAB>relation<TAB>tail")
    return labels


def known_labels(questions: dict[str, dict], extra: list[str]) -> qa_metrics.KnownLabels:
    """Every entity name of the questions (answers, hard answer, topic entity) and ``extra``."""
    names = [*extra]
    for q in questions.values():
        names += [a for a in q["answers"] if isinstance(a, str)]
        names += [q[k] for k in ("hard_answer", "topic_entity") if isinstance(q.get(k), str)]
    return qa_metrics.KnownLabels(names)


@dataclass
class EvaluateQAOptions:
    questions: list[str] = arg(
        help="question JSON Lines file of a release (repeatable)", action="append", required=True, factory=list
    )
    predictions: str = arg(None, 'JSON Lines: {"id": ..., "prediction": "raw output" or [answers]}', required=True)
    scheme: str = arg(
        "private_id", "entity naming of questions and predictions", choices=["private_id", "entity_id", "text_label"]
    )
    per_question: str | None = arg(None, "also write per-question scores (JSON Lines) here")
    labels: str | None = arg(
        None, "text_label: more known labels (one a line, or the release's kg/text_label/complete.tsv)"
    )


@job(
    "evaluate-qa",
    "BRINK QA metrics (Hits@Any, P, R, F1, Hits@Hard, HHR, permissive) of predictions",
    EvaluateQAOptions,
    spark=False,
    steps=1,
)
def run(ctx: JobContext, opts: EvaluateQAOptions) -> JobSummary:
    question_paths, predictions_path, scheme, per_question = (
        opts.questions,
        opts.predictions,
        opts.scheme,
        opts.per_question,
    )
    if scheme not in ("private_id", "entity_id", "text_label"):
        raise QAInputError(f"--scheme must be private_id, entity_id or text_label, got {scheme!r}")
    summary = ctx.begin(questions=",".join(question_paths), predictions=predictions_path, scheme=scheme)
    with ctx.step("evaluate"):
        questions = read_questions([Path(p) for p in question_paths])
        predictions = read_predictions(Path(predictions_path), questions)
        labels = None
        if scheme == "text_label":
            labels = known_labels(questions, read_labels(Path(opts.labels)) if opts.labels else [])
            summary.counts["known_labels"] = len(labels)
        scored = {
            qid: qa_metrics.score_question(predictions.get(qid, ""), q["answers"], q["hard_answer"], scheme, labels)
            for qid, q in sorted(questions.items())
        }
        metrics = qa_metrics.aggregate(list(scored.values()))
    summary.counts.update(
        questions=len(questions), predictions=len(predictions), missing_predictions=len(questions) - len(predictions)
    )
    summary.results = [{"metric": k, "value": v} for k, v in metrics.items() if k != "questions"]
    summary.highlights.update(headline(summary.results, HEADLINE))
    if per_question:
        out = Path(per_question)
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w") as f:
            for qid, s in scored.items():
                f.write(json.dumps({"id": qid, **s.__dict__}) + "\n")
        summary.artifacts.append(str(out))
    return summary
