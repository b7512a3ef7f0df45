"""The parsers of model answers on random outputs (issue 70, item 8): prose around the fields, braces, unicode,
empty text. Whatever a model sends, each parser returns a value of its contract and never raises."""

from __future__ import annotations

import string

from hypothesis import given, settings
from hypothesis import strategies as st

from kgbrink.brink import reader
from kgbrink.mcq import answering as mcq
from kgbrink.okgqa import answering as okgqa
from kgbrink.synthkgqa import answering as gtsqa

PIECES = st.sampled_from(
    ["{", "}", "{}", "The answer is ", "Answer:", "Score: ", "/10", "**", "- ", "1. ", "true", "False", "\n", " ", "A",
     "B.", "C", "yes", "no", "é", "日本", "\u200b", "I don't know", "not", "?"]
)  # fmt: skip
OUTPUTS = st.one_of(
    st.none(),
    st.text(max_size=200),
    st.lists(st.one_of(PIECES, st.text(alphabet=string.printable, max_size=8)), max_size=30).map("".join),
)


@settings(max_examples=300, deadline=None)
@given(content=OUTPUTS, k=st.integers(2, 8))
def test_probekgc_letters_are_one_of_the_k_options_or_void(content, k):
    for letter in (mcq.direct_letter(content, k), mcq.cot_letter(content, k)):
        assert letter is None or letter in mcq.LETTERS[:k]
    record = mcq.prediction("q", content, strategy="cot", n_options=k)
    assert (record["letter"] is None) == (record["reason"] == mcq.VOID)


@settings(max_examples=300, deadline=None)
@given(content=OUTPUTS, labels=st.lists(st.text(max_size=20), max_size=4))
def test_synthkgqa_answers_and_em_stay_in_range(content, labels):
    answer = gtsqa.answer_text(content)
    assert answer == answer.strip() and answer in (content or "")
    scores = gtsqa.answer_scores(content, labels)
    for name in ("em", "em_strict"):
        assert scores[f"{name}_hits"] in (0.0, 1.0) and 0.0 <= scores[f"{name}_recall"] <= 1.0
        assert (scores[f"{name}_hits"] == 1.0) == (scores[f"{name}_recall"] > 0)
    if answer.strip() and "{" not in answer and "}" not in answer:
        assert gtsqa.answer_scores(answer, [answer])["em_hits"] == 1.0


@settings(max_examples=300, deadline=None)
@given(content=OUTPUTS, limit=st.integers(1, 40))
def test_okgqa_facts_verdicts_and_scores_are_well_formed(content, limit):
    facts = okgqa.atomic_facts(content, limit)
    assert len(facts) <= limit and len(set(facts)) == len(facts)
    assert all(f == f.strip() and f and f in (content or "") for f in facts)
    assert isinstance(okgqa.is_supported(content), bool)
    score = okgqa.geval_score(content)
    assert score is None or 0 <= score <= 10
    parsed = okgqa.parse(content)
    assert parsed["abstained"] == (parsed["reason"] == okgqa.ABSTAINED)


@settings(max_examples=300, deadline=None)
@given(content=OUTPUTS)
def test_brink_reader_output_parses_to_a_set_or_a_refusal(content):
    parsed = reader.parse(content, item_id="q", scheme="text_label")
    assert parsed["refusal"] == (parsed["reason"] == reader.REFUSAL_REASON)
    assert not parsed["refusal"] or parsed["prediction"] == []
    assert len(parsed["parsed"]) == len(set(parsed["parsed"])) and all(parsed["parsed"])
