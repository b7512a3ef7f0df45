"""BRINK's QA metrics (Sec. 4.3, Alg. 3, App. I) on hand-computed cases; `kgbrink evaluate-qa` input errors."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgbrink.brink.qa_metrics import KnownLabels, aggregate, norm, score_question, split_output
from kgbrink.core.console import headline, human_summary
from kgbrink.core.jobs import JobContext
from kgbrink.jobs import evaluate_qa


def test_norm_lowercases_and_drops_pad_punctuation_articles_and_spaces():
    assert norm("  The  Paris! ") == "paris"
    assert norm("<pad> London<pad>") == "london"
    assert norm("An Apple a day") == "apple day"
    assert norm("Q42.") == "q42"
    assert norm("the") == ""


def test_split_depends_on_whether_names_may_hold_spaces():
    assert split_output("12, 7 9\n13", "private_id") == ["12", "7", "9", "13"]
    assert split_output(["Barack Obama", "Paris"], "text_label") == ["Barack Obama", "Paris"]
    # without known labels a text-label output is cut at newlines and separators only
    assert split_output("Washington, D.C.\nParis; Rome|Oslo", "text_label") == [
        "Washington",
        "D.C.",
        "Paris",
        "Rome",
        "Oslo",
    ]


KNOWN = KnownLabels(["Paris", "London", "Washington, D.C.", "Barack Obama", "New York", "New York City", "The Hague"])


def test_app_e_examples_split_into_two_answers():
    # App. E: "Paris, London" and "Paris London" are both the list [Paris, London]
    assert split_output("Paris, London", "text_label", KNOWN) == ["Paris", "London"]
    assert split_output("Paris London", "text_label", KNOWN) == ["Paris", "London"]
    assert split_output("Paris\nLondon\n", "text_label", KNOWN) == ["Paris", "London"]
    s = score_question("Paris, London", ["Paris", "London", "Rome"], "London", "text_label", KNOWN)
    # P = {paris, london}, A = {paris, london, rome}
    assert (s.hit, s.precision, s.recall, s.f1, s.hard) == (1.0, 1.0, pytest.approx(2 / 3), 0.8, 1.0)


def test_known_comma_labels_stay_whole_longest_match_first():
    assert split_output("Washington, D.C.", "text_label", KNOWN) == ["Washington, D.C."]
    assert split_output("Washington, D.C., Paris", "text_label", KNOWN) == ["Washington, D.C.", "Paris"]
    assert split_output("London;Washington, D.C.", "text_label", KNOWN) == ["London", "Washington, D.C."]
    # a known label with spaces is not cut; words are cut only when every part is a known label, as few as
    # possible ("New York City" before "New York" + an unknown "City")
    assert split_output("Barack Obama", "text_label", KNOWN) == ["Barack Obama"]
    assert split_output("New York City London", "text_label", KNOWN) == ["New York City", "London"]
    assert split_output("the hague paris", "text_label", KNOWN) == ["the hague", "paris"]
    assert split_output("Paris and London", "text_label", KNOWN) == ["Paris and London"]  # "and" is no label
    assert split_output("Lyon, Paris", "text_label", KNOWN) == ["Lyon", "Paris"]  # unknown pieces still cut


def test_question_answers_are_known_labels_for_their_own_output():
    # no known labels given: the gold answer itself keeps "Washington, D.C." whole
    s = score_question("Washington, D.C.", ["Washington, D.C."], "Washington, D.C.", "text_label")
    assert (s.hit, s.precision, s.recall, s.f1, s.hard) == (1.0, 1.0, 1.0, 1.0, 1.0)
    # a known label of the question set that is not this question's answer is one wrong answer, not two
    # pieces of which "Washington" would match the gold answer
    s = score_question("Washington, D.C.", ["Washington"], "Washington", "text_label", KNOWN)
    assert (s.hit, s.precision) == (0.0, 0.0)
    s = score_question("Washington, D.C.", ["Washington"], "Washington", "text_label")
    assert (s.hit, s.precision) == (1.0, 0.5)  # without the set's labels the comma label is cut


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.sampled_from(["Paris", "London", "Washington, D.C.", "New York City", "Barack Obama"]), min_size=1),
    st.lists(st.sampled_from([", ", "; ", "\n", " | ", ",", "\n\n"]), min_size=1),
)
def test_known_labels_joined_by_any_separator_split_back(labels, separators):
    raw = "".join(label + separators[k % len(separators)] for k, label in enumerate(labels))
    assert [norm(p) for p in split_output(raw, "text_label", KNOWN)] == [norm(x) for x in labels]


def test_one_question_by_hand():
    # P = {7, 13}, A = {12, 7}: |P & A| = 1
    s = score_question("7\n13", ["12", "7"], hard_answer="7", scheme="private_id")
    assert (s.hit, s.precision, s.recall, s.f1, s.hard) == (1.0, 0.5, 0.5, 0.5, 1.0)
    # three answers, two predicted, the hard one missed: P = {1, 2}, A = {1, 2, 3}
    s = score_question("1 2", ["1", "2", "3"], hard_answer="3", scheme="entity_id")
    assert (s.hit, s.precision, s.recall, s.hard) == (1.0, 1.0, pytest.approx(2 / 3), 0.0)
    assert s.f1 == pytest.approx(2 * 2 / (2 + 3))


def test_answers_that_normalise_to_nothing_still_match():
    # a label "The" normalises to "": it is compared as "the" instead of being lost
    s = score_question("The\nParis", ["The", "Rome"], hard_answer="The", scheme="text_label")
    assert (s.hit, s.precision, s.recall, s.hard) == (1.0, 0.5, 0.5, 1.0)


def test_empty_prediction_scores_zero_everywhere():
    s = score_question("", ["5"], hard_answer="5", scheme="private_id")
    assert (s.hit, s.precision, s.recall, s.f1, s.hard) == (0.0, 0.0, 0.0, 0.0, 0.0)
    assert (s.permissive_hit, s.permissive_precision, s.permissive_recall, s.permissive_f1) == (0.0, 0.0, 0.0, 0.0)
    assert score_question("<pad> the", ["5"], "5", "private_id").hit == 0.0


def test_aggregate_means_and_hhr():
    scores = [
        score_question("1", ["1"], "1", "private_id"),  # hit, hard
        score_question("2", ["1", "2"], "1", "private_id"),  # hit, not hard; precision 1, recall 1/2
        score_question("9", ["1"], "1", "private_id"),  # miss
        score_question("", ["1"], "1", "private_id"),  # empty
    ]
    got = aggregate(scores)
    assert got["questions"] == 4
    assert got["hits_at_any"] == 0.5
    assert got["hits_at_hard"] == 0.25
    assert got["hhr"] == 0.5
    assert got["precision"] == pytest.approx((1 + 1 + 0 + 0) / 4)
    assert got["recall"] == pytest.approx((1 + 0.5) / 4)
    assert got["f1"] == pytest.approx((1 + 2 / 3) / 4)
    assert aggregate([score_question("9", ["1"], "1", "private_id")])["hhr"] is None


def test_permissive_substring_variant_counts_negated_answers():
    # App. I: "not Barack Obama" counts as correct under the permissive metric, not under Sec. 4.3's
    s = score_question("not Barack Obama", ["Barack Obama"], "Barack Obama", "text_label")
    assert (s.hit, s.hard) == (0.0, 0.0)
    assert (s.permissive_hit, s.permissive_precision, s.permissive_recall, s.permissive_f1) == (1.0, 1.0, 1.0, 1.0)
    # two answers inside one output line: matched 2, one line -> precision capped at 1, recall 2/3
    s = score_question("Paris and Rome", ["Paris", "Rome", "Oslo"], "Oslo", "text_label")
    assert (s.permissive_precision, s.permissive_recall) == (1.0, pytest.approx(2 / 3))


def _jsonl(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return str(path)


def test_evaluate_qa_files_and_missing_predictions(tmp_path):
    questions = _jsonl(
        tmp_path / "test.jsonl",
        [
            {"id": "q1", "answers": ["1", "2"], "hard_answer": "2"},
            {"id": "q2", "answers": ["3"], "hard_answer": "3"},
        ],
    )
    predictions = _jsonl(tmp_path / "pred.jsonl", [{"id": "q1", "prediction": "2, 5"}])
    summary = evaluate_qa.run(
        JobContext(None, None),
        evaluate_qa.EvaluateQAOptions([questions], predictions, "private_id", str(tmp_path / "per.jsonl")),
    )
    results = {r["metric"]: r["value"] for r in summary.results}
    assert summary.counts == {"questions": 2, "predictions": 1, "missing_predictions": 1}
    assert results["hits_at_any"] == 0.5 and results["hits_at_hard"] == 0.5 and results["hhr"] == 1.0
    assert results["precision"] == 0.25 and results["recall"] == 0.25
    assert len((tmp_path / "per.jsonl").read_text().splitlines()) == 2
    # the summary prints the headline numbers: F1 (1/2 + 0) / 2 per question, averaged
    assert summary.highlights == {"scores": "Hits@Any 0.500, F1 0.250, Hits@Hard 0.500, HHR 1.000"}
    assert "  scores: Hits@Any 0.500, F1 0.250, Hits@Hard 0.500, HHR 1.000" in human_summary(summary, None, None)


def test_evaluate_qa_text_labels_use_the_question_set_and_labels_file(tmp_path):
    questions = _jsonl(
        tmp_path / "test.jsonl",
        [
            {"id": "q1", "answers": ["Paris"], "hard_answer": "Paris", "topic_entity": "Washington, D.C."},
            {"id": "q2", "answers": ["Oslo", "Rome"], "hard_answer": "Rome", "topic_entity": "Norway"},
        ],
    )
    # q1: "Washington, D.C." is a known label (q1's topic): one wrong answer and Paris, precision 1/2.
    # q2: "Oslo Rome" splits into two known labels; "Salt Lake City, Utah" is known only from the labels
    # file (its KG TSV form), so it stays one wrong answer: P = {oslo, rome, salt lake city utah}
    predictions = _jsonl(
        tmp_path / "pred.jsonl",
        [
            {"id": "q1", "prediction": "Washington, D.C., Paris"},
            {"id": "q2", "prediction": "Oslo Rome\nSalt Lake City, Utah"},
        ],
    )
    labels = tmp_path / "complete.tsv"
    labels.write_text("Salt Lake City, Utah\tcapital of\tUtah\n")
    summary = evaluate_qa.run(
        JobContext(None, None),
        evaluate_qa.EvaluateQAOptions([questions], predictions, "text_label", labels=str(labels)),
    )
    results = {r["metric"]: r["value"] for r in summary.results}
    assert summary.counts["known_labels"] == 7  # paris, washington dc, oslo, rome, norway, salt lake city utah, utah
    assert results["precision"] == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert results["recall"] == 1.0 and results["hits_at_hard"] == 1.0
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\n")
    with pytest.raises(evaluate_qa.QAInputError, match=r"bad.tsv:1: expected one label"):
        evaluate_qa.run(
            JobContext(None, None),
            evaluate_qa.EvaluateQAOptions([questions], predictions, "text_label", labels=str(bad)),
        )


@pytest.mark.parametrize(
    "lines, message",
    [
        (['{"id": "q1", "prediction": "1"}', "{oops"], r"pred.jsonl:2: not JSON"),
        (['{"id": "zz", "prediction": "1"}'], r"pred.jsonl:1: prediction for unknown question id 'zz'"),
        (['{"id": "q1"}'], r"pred.jsonl:1: missing field\(s\) prediction"),
        (['{"id": "q1", "prediction": "1"}', '{"id": "q1", "prediction": "2"}'], r"pred.jsonl:2: second prediction"),
        (['{"id": "q1", "prediction": 7}'], r"pred.jsonl:1: prediction must be a string"),
        (['{"id": "q1", "prediction": ["1", 5, null, {"x": 1}]}'], r"pred.jsonl:1: prediction item 2 \(5\) is not a"),
        (["", "  "], r"pred.jsonl: no predictions"),
        (['{"id": true, "prediction": "1"}'], r"pred.jsonl:1: id True is not a string or an integer"),
        (['{"id": 7.0, "prediction": "1"}'], r"pred.jsonl:1: id 7.0 is not a string or an integer"),
        (['["q1", "1"]'], r"pred.jsonl:1: not a JSON object"),
    ],
)
def test_evaluate_qa_rejects_bad_prediction_lines(tmp_path, lines, message):
    questions = _jsonl(tmp_path / "q.jsonl", [{"id": "q1", "answers": ["1"], "hard_answer": "1"}])
    predictions = _jsonl(tmp_path / "pred.jsonl", lines)
    with pytest.raises(evaluate_qa.QAInputError, match=message):
        evaluate_qa.run(JobContext(None, None), evaluate_qa.EvaluateQAOptions([questions], predictions, "private_id"))


def test_evaluate_qa_rejects_bad_question_files(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(evaluate_qa.QAInputError, match="no questions"):
        evaluate_qa.run(JobContext(None, None), evaluate_qa.EvaluateQAOptions([str(empty)], str(empty), "private_id"))
    bad = _jsonl(tmp_path / "bad.jsonl", [{"id": "q1", "answers": [], "hard_answer": "1"}])
    with pytest.raises(
        evaluate_qa.QAInputError, match=r"bad.jsonl:1: answers must be a list of strings, at least one non-empty"
    ):
        evaluate_qa.run(JobContext(None, None), evaluate_qa.EvaluateQAOptions([bad], str(empty), "private_id"))


@pytest.mark.parametrize(
    "line, message",
    [
        (b'{"id": "q1", "answers": ["1", 2], "hard_answer": "1"}', r"q.jsonl:2: answers must be a list of strings"),
        (b'{"id": "q1", "answers": "1", "hard_answer": "1"}', r"q.jsonl:2: answers must be a list of strings"),
        (b'{"id": "q1", "answers": ["1"], "hard_answer": ["1"]}', r"q.jsonl:2: hard_answer \['1'\] is not one of"),
        (
            b'{"id": "q1", "answers": ["1"], "hard_answer": "9"}',
            r"q.jsonl:2: hard_answer '9' is not one of the answers",
        ),
        (b'{"id": "q1", "answers": ["\xff"], "hard_answer": "1"}', r"q.jsonl:2: not UTF-8 \(byte 27 of the line\)"),
        (b'{"id": null, "answers": ["1"], "hard_answer": "1"}', r"q.jsonl:2: id None is not a string or an integer"),
    ],
)
def test_evaluate_qa_names_the_line_of_a_bad_question(tmp_path, line, message):
    questions = tmp_path / "q.jsonl"
    questions.write_bytes(b'{"id": "q0", "answers": ["1"], "hard_answer": "1"}\n' + line + b"\n")
    predictions = _jsonl(tmp_path / "pred.jsonl", [{"id": "q0", "prediction": "1"}])
    with pytest.raises(evaluate_qa.QAInputError, match=message):
        evaluate_qa.run(
            JobContext(None, None), evaluate_qa.EvaluateQAOptions([str(questions)], predictions, "private_id")
        )


_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=False), st.text(max_size=3)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=2),
    max_leaves=5,
)
_QUESTIONS = {
    "q1": {"id": "q1", "answers": ["a"], "hard_answer": "a"},
    "q2": {"id": "q2", "answers": ["b"], "hard_answer": "b"},
}
# lines that are no prediction of a known question, whatever else they hold
_JUNK = st.one_of(
    st.fixed_dictionaries(
        {"id": st.one_of(st.sampled_from(["nope", "Q1", 1]), st.booleans(), st.floats(), st.lists(st.just("q1")))},
        optional={"prediction": _JSON},
    ).map(json.dumps),
    st.fixed_dictionaries({"prediction": _JSON}).map(json.dumps),
    st.fixed_dictionaries(
        {
            "id": st.sampled_from(["q1", "q2"]),
            "prediction": st.one_of(
                st.integers(),
                st.lists(_JSON, min_size=1).filter(lambda x: not all(isinstance(i, str) for i in x)),
                st.dictionaries(st.text(max_size=2), _JSON),
            ),
        }
    ).map(json.dumps),
    _JSON.filter(lambda x: not isinstance(x, dict)).map(json.dumps),
    st.sampled_from(["{", "not json", '{"id": "q1"', "\ud800"]),
)


@settings(max_examples=60, deadline=None)
@given(
    good=st.lists(st.sampled_from(["q1", "q2"]), unique=True, max_size=2),
    junk=st.lists(_JUNK, max_size=3),
    blanks=st.integers(0, 2),
    data=st.data(),
)
def test_a_prediction_file_is_read_whole_or_refused_at_its_first_bad_line(tmp_path_factory, good, junk, blanks, data):
    lines = [json.dumps({"id": q, "prediction": [q]}) for q in good] + junk + [""] * blanks
    lines = data.draw(st.permutations(lines))
    path = tmp_path_factory.mktemp("qa") / "predictions.jsonl"
    path.write_bytes("\n".join(lines).encode("utf-8", "surrogatepass") + b"\n")
    first_bad = next((n for n, line in enumerate(lines, 1) if line in junk), None)
    if first_bad is None and not good:
        with pytest.raises(evaluate_qa.QAInputError, match="no predictions"):
            evaluate_qa.read_predictions(path, _QUESTIONS)
    elif first_bad is None:
        assert evaluate_qa.read_predictions(path, _QUESTIONS) == {q: [q] for q in good}
    else:
        with pytest.raises(evaluate_qa.QAInputError, match=f"^{path}:{first_bad}: "):
            evaluate_qa.read_predictions(path, _QUESTIONS)


def test_headline_numbers_per_model_and_run_in_the_declared_order():
    rows = [
        {"model": "b", "run": "1", "metric": "nkd.easy", "alpha": None, "beta": None, "value": 0.25},
        {"model": "b", "run": "1", "metric": "accuracy.easy", "alpha": None, "beta": None, "value": 0.5},
        {"model": "a", "run": "2", "metric": "accuracy.easy", "alpha": None, "beta": None, "value": 1.0},
        {"model": "a", "run": "2", "metric": "probe", "alpha": 1.0, "beta": 0.0, "value": 0.1},  # not plain
        {"model": "a", "run": "2", "metric": "other", "alpha": None, "beta": None, "value": 0.3},  # not asked
    ]
    wanted = {"accuracy.easy": "accuracy easy", "nkd.easy": "NKD easy"}
    assert headline(rows, wanted) == {
        "scores a run 2": "accuracy easy 1.000",
        "scores b run 1": "accuracy easy 0.500, NKD easy 0.250",
    }
    assert headline(rows[:2], wanted) == {"scores": "accuracy easy 0.500, NKD easy 0.250"}
    assert headline([{"metric": "hhr", "value": None}], {"hhr": "HHR"}) == {"scores": "HHR -"}
    assert headline([], wanted) == {}
