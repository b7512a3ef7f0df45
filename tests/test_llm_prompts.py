"""Prompt templates and answer parsers of issue 58 (spec model-evaluation.md): worked examples E1-E6, the
printed prompts byte-for-byte against fixtures written from the spec and paper texts, malformed outputs,
and property tests. Pure Python, no Spark."""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgbrink.brink import qa_metrics, reader
from kgbrink.evaluation import templates as builtins
from kgbrink.llm import templates
from kgbrink.mcq import answering as mcq
from kgbrink.okgqa import answering as okgqa
from kgbrink.synthkgqa import answer_types, writing
from kgbrink.synthkgqa import answering as gtsqa

FIXTURES = Path(__file__).parent / "fixtures" / "prompts"
E = 1e-6


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


# --- templates ----------------------------------------------------------------------------------------


def test_builtin_templates_are_named_versioned_and_digested():
    refs = builtins.names()
    assert set(refs) >= {
        "brink-reader@1",
        "brink-rewrite@1",
        "probekgc-direct@1",
        "probekgc-cot@1",
        "synthkgqa-write@1",
        "okgqa-answer@1",
    }
    digests = set()
    for ref in refs:
        t = builtins.builtin(ref)
        assert t.ref == ref and builtins.builtin(ref.split("@")[0]) == t
        canonical = json.dumps(templates.as_dict(t), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert templates.digest(t) == hashlib.sha256(canonical.encode()).hexdigest() == templates.digest(t)
        digests.add(templates.digest(t))
    assert len(digests) == len(refs)
    with pytest.raises(templates.TemplateError, match="no built-in template"):
        builtins.builtin("nope@1")


def test_render_replaces_only_declared_slots_in_one_pass():
    t = templates.Template(
        "t",
        1,
        (("system", "S {a}"), ("user", "{a}|{b}|{c}|{wd:Q1 wdt:P2 ?x.}|{{a}}|{Retrieved-knowledge}")),
        ("a", "b"),
    )
    messages = templates.render(t, {"a": "{b}", "b": 2, "c": "unused"})
    assert messages == [
        {"role": "system", "content": "S {b}"},
        {"role": "user", "content": "{b}|2|{c}|{wd:Q1 wdt:P2 ?x.}|{{b}}|{Retrieved-knowledge}"},
    ]
    with pytest.raises(templates.TemplateError, match="no value for slot.*b"):
        templates.render(t, {"a": "x"})
    shots = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    assert [m["content"] for m in templates.render(t, {"a": 1, "b": 2}, shots)][1:3] == ["q", "a"]
    with pytest.raises(templates.TemplateError, match="cannot be filled"):
        templates.check_slots(t, ("a",))


def test_user_template_files_round_trip_and_match_the_builtin_digest(tmp_path):
    t = builtins.builtin("synthkgqa-write@1")
    as_json = tmp_path / "mine.json"
    as_json.write_text(json.dumps(templates.as_dict(t)))
    assert templates.load(as_json) == t and templates.digest(templates.load(as_json)) == templates.digest(t)
    as_yaml = tmp_path / "mine.yaml"
    as_yaml.write_text(
        "name: my-reader\nversion: 2\nslots: [question]\nparams: {temperature: 0}\n"
        "messages:\n  - role: user\n    content: 'Q: {question} {not a slot}'\n"
    )
    mine = builtins.resolve(str(as_yaml))
    assert mine.ref == "my-reader@2" and mine.params == {"temperature": 0}
    assert templates.render(mine, {"question": "x"})[0]["content"] == "Q: x {not a slot}"


GOOD = {"name": "x", "version": 1, "slots": ["q"], "messages": [{"role": "user", "content": "{q}"}]}


@pytest.mark.parametrize(
    "change, field",
    [
        ({"messages": [{"role": "tool", "content": "{q}"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": "{q}", "name": "n"}]}, "messages[0]"),
        ({"messages": [{"role": "user", "content": " "}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": "{q}" + "x" * 100_000}]}, "messages[0].content"),
        ({"messages": []}, "messages"),
        ({"slots": ["q", "r"]}, "slots"),
        ({"slots": ["bad name"]}, "slots[0]"),
        ({"slots": ["q", "q"]}, "slots"),
        ({"version": True}, "version"),
        ({"version": "1"}, "version"),
        ({"name": "Has Space"}, "name"),
        ({"extra": 1}, "extra"),
        ({"params": {"t": [1]}}, "params.t"),
        ({"examples_at": 5}, "examples_at"),
    ],
)
def test_a_bad_template_file_names_the_file_and_the_field(tmp_path, change, field):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**GOOD, **change}))
    with pytest.raises(templates.TemplateError) as caught:
        templates.load(path)
    assert str(caught.value).startswith(f"{path}: {field}:")


def test_unreadable_template_files(tmp_path):
    for name, body, problem in [
        ("a.json", b"{", "not JSON"),
        ("a.yaml", b"a: [", "not YAML"),
        ("a.yml", b"\xff", "not UTF-8"),
        ("a.txt", b"{}", "must end in"),
        ("big.json", b" " * (templates.MAX_FILE_BYTES + 1), "bytes >"),
        ("list.json", b"[]", "must be an object"),
    ]:
        (tmp_path / name).write_bytes(body)
        with pytest.raises(templates.TemplateError, match=problem):
            templates.load(tmp_path / name)
    with pytest.raises(templates.TemplateError, match="cannot be read"):
        templates.load(tmp_path / "missing.json")


values = st.text(max_size=40)


@settings(max_examples=200, deadline=None)
@given(a=values, b=values, c=values)
def test_render_never_raises_and_round_trips_the_values(a, b, c):
    t = templates.Template("p", 1, (("user", "<{a}>{b}<{c}>{a}"),), ("a", "b", "c"))
    assert templates.render(t, {"a": a, "b": b, "c": c}) == [{"role": "user", "content": f"<{a}>{b}<{c}>{a}"}]


# --- BRINK (paper 000) --------------------------------------------------------------------------------

E1_RECORD = {
    "id": "q1",
    "question": "Who is 139's brother?",
    "topic_entity": "139",
    "hard_answer": "205",
    "groundings": [
        {
            "rule": "?a  fatherOf  ?e  ?b  uncleOf  ?e   => ?a  brotherOf  ?b",
            "body": [["139", "fatherOf", "14"], ["205", "uncleOf", "14"]],
        }
    ],
}


def test_e1_oracle_reader_prompt():
    messages = reader.prompt(E1_RECORD, context="oracle")
    assert messages == [{"role": "user", "content": fixture("brink-reader-e1.txt")}]
    spec = fixture("brink-reader-spec.txt").rstrip("\n").split("\n")  # the spec's wrapped first line joined
    template_text = "\n".join([spec[0] + " " + spec[1], *spec[2:4], "{triples}", *spec[5:]])
    assert builtins.builtin("brink-reader@1").messages == (("user", template_text),)


def test_oracle_lists_each_rule_once_then_its_body_triples():
    second = {"rule": E1_RECORD["groundings"][0]["rule"], "body": [["139", "fatherOf", "15"], ["205", "uncleOf", "14"]]}
    other = {"rule": "?b  P26  ?a   => ?a  P26  ?b", "body": [["205", "P26", "139"]]}
    lines = reader.oracle_lines([*E1_RECORD["groundings"], other, second], {"P26": "spouse"})
    assert lines == [
        "Rule: fatherOf(X, Z) ∧ uncleOf(Y, Z) ⇒ brotherOf(X, Y)",
        "139 fatherOf 14",
        "205 uncleOf 14",
        "139 fatherOf 15",
        "Rule: spouse(Y, X) ⇒ spouse(X, Y)",
        "205 P26 139",
    ]
    assert reader.rule_notation("  fatherOf(X, Z) ⇒ parentOf(X, Z) ") == "fatherOf(X, Z) ⇒ parentOf(X, Z)"


def test_neighbourhood_and_none_contexts():
    triples = [["a", "r", f"n{i}", 2] for i in range(5)] + [["a", "r", f"m{i}", 1] for i in range(3)]
    lines = reader.neighbourhood_lines(triples, seed=7, max_triples=4)
    assert len(lines) == 4 and {x.split()[2] for x in lines[:3]} == {"m0", "m1", "m2"}
    assert lines == reader.neighbourhood_lines(list(reversed(triples)), seed=7, max_triples=4)
    record = {**E1_RECORD, "triples": triples}
    text = reader.prompt(record, context="neighbourhood", seed=7, max_triples=4)[0]["content"]
    assert "\n".join(lines) in text
    none = reader.prompt(record, context="none")[0]["content"]
    assert "Knowledge Triples" not in none and none.endswith("Question:\nWho is 139's brother?\nTopic Entity: 139")
    with pytest.raises(ValueError, match="context"):
        reader.prompt(record, context="paths")


def test_e2_outputs_to_brink_metrics():
    questions = [
        (["205", "138", "2973", "2974"], "205", "205\n138, 9999"),
        (["14", "15"], "14", "15"),
        (["1", "2"], "1", "I don't know."),
    ]
    parsed = [reader.parse(out, item_id=f"q{i}") for i, (_, _, out) in enumerate(questions)]
    assert [p["parsed"] for p in parsed] == [["205", "138", "9999"], ["15"], []]
    assert parsed[2]["prediction"] == [] and reader.n_refusals(parsed) == 1
    scores = [
        qa_metrics.score_question(p["prediction"], answers, hard, "private_id")
        for p, (answers, hard, _) in zip(parsed, questions)
    ]
    assert [(s.hit, s.precision, s.recall, s.f1, s.hard) for s in scores[:2]] == pytest.approx(
        [(1, 2 / 3, 1 / 2, 4 / 7, 1), (1, 1, 1 / 2, 2 / 3, 0)]
    )
    total = qa_metrics.aggregate(scores)
    expected = {"hits_at_any": 0.666667, "precision": 0.555556, "recall": 0.333333, "f1": 0.412698}
    assert {k: total[k] for k in expected} == pytest.approx(expected, abs=E)
    assert total["hits_at_hard"] == pytest.approx(0.333333, abs=E) and total["hhr"] == pytest.approx(0.5, abs=E)


def test_reader_parse_edges():
    assert reader.parse("Answer: Paris\nLondon", scheme="text_label")["parsed"] == ["paris", "london"]
    assert reader.parse("  ", item_id=3) == {
        "id": 3,
        "prediction": "",
        "parsed": [],
        "refusal": False,
        "truncated": False,
        "reason": "empty",
    }
    assert reader.parse("UNKNOWN")["refusal"] and not reader.parse("unknown person")["refusal"]
    assert reader.parse("12\n13", finish_reason="length")["truncated"]


def test_failure_kinds():
    shown = reader.context_triples(E1_RECORD, "oracle")
    assert reader.failure(E1_RECORD, shown, hard_hit=False) == "reasoning_failure"
    assert reader.failure(E1_RECORD, {("139", "fatherOf", "14")}, hard_hit=False) == "retrieval_failure"
    assert reader.failure(E1_RECORD, set(), hard_hit=True) is None


def test_app_d_rewrite_prompt_and_acceptance():
    assert builtins.builtin("brink-rewrite@1").messages[0][1] + "\n" == fixture("brink-rewrite-appD.txt")
    record = {
        "question": "Who is the brother of Bob?",
        "topic_entity": "Bob",
        "hard_answer": "Al",
        "removed_triple": ["Bob", "brother_of", "Al"],
    }
    text = reader.rewrite_prompt(record)[0]["content"]
    assert "Removed Triple: (Bob, brother_of, Al)\nQuestion Entity: Bob\nAnswer Entity: Al" in text
    assert 'Removed Triple: ("Alice", "wife_of", "Carol")' in text
    assert not templates.used_slots(text) - {"a"}
    check = reader.rewrite_check
    assert check("Who is Bob's brother?\nextra", record)["question"] == "Who is Bob's brother?"
    assert check("Which sibling of Bob is called Alice?", record)["rewritten"]  # "Al" only inside "Alice"
    for bad, why in [
        ("Who is Al, Bob's brother?", "answer"),
        ("Who is the brother?", "topic"),
        ("Name Bob's brother.", "'?'"),
        ("Is Al Bob's brother?", "answer"),
        ("Does Bob have a brother?", "yes/no"),
        ("", "empty"),
    ]:
        result = check(bad, record)
        assert (result["question"], result["reason"]) == (record["question"], "rewrite_rejected")
        assert why in result["detail"]
    assert reader.in_scheme("Who is Bob's brother?", "Bob", "139") == "Who is 139's brother?"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60) | st.sampled_from(["I don't know.", " unknown ", "No answer!", "Answer: 1, 2"]))
def test_brink_parse_of_any_string(content):
    out = reader.parse(content, scheme="text_label")
    assert all(p and qa_metrics.norm(p) == p for p in out["parsed"])
    text = reader.ANSWER_PREFIX.sub("", content, count=1).strip()
    assert out["refusal"] == bool(text and reader.REFUSAL.match(text))
    assert out["prediction"] == ([] if out["refusal"] else text)


# --- ProbeKGC (paper 003) -----------------------------------------------------------------------------

E5_DIRECT = (
    "The incomplete triple is:\n(Lisbon, country, <mask>)\n\nComplete the triple by answering the following "
    "question:\nWhat is the country of Lisbon?\nA. Spain\nB. Brazil\nC. Portugal\nD. Italy\n\n"
    "Reply with the correct option ID (A/B/C/D). Do not reply any other words."
)


def test_e5_cot_prompt_and_direct_prompt():
    from kgbrink.mcq.render import SYSTEM_PROMPT

    record = {"id": "q", "text": E5_DIRECT, "options": [1, 2, 3, 4]}
    cot = mcq.prompt(record, strategy="cot")
    assert cot == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": fixture("probekgc-cot-e5.txt")},
    ]
    assert mcq.prompt(record) == [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": E5_DIRECT}]
    single = mcq.prompt(record, single_user_message=True)
    assert single == [{"role": "user", "content": SYSTEM_PROMPT + "\n\n" + E5_DIRECT}]
    with pytest.raises(ValueError, match="Reply with"):
        mcq.prompt({"text": "no reply line"}, strategy="cot")


def test_probekgc_rag_context_goes_before_the_question_block():
    context = {
        "entity": "Lisbon",
        "description": "capital of Portugal",
        "entity_statements": ["Lisbon is located in Portugal."],
        "relation": "country",
        "relation_statements": ["Porto is in Portugal.", "Madrid is in Spain."],
    }
    text = mcq.prompt({"text": E5_DIRECT}, strategy="cot", context=context)[1]["content"]
    assert text.startswith(
        'The incomplete triple is:\n(Lisbon, country, <mask>)\n\nThe background knowledge of entity "Lisbon" is:\n'
        'capital of Portugal\n\nThe triples related to entity "Lisbon" are:\nLisbon is located in Portugal.\n\n'
        'The triples related to relation "country" are:\nPorto is in Portugal.\nMadrid is in Spain.\n\n'
        "Complete the triple by answering the following question:\n"
    )


def test_e5_cot_letters_and_accuracy():
    outputs = [
        "Lisbon lies in Portugal. **The answer is C.**",
        "Madrid is in Spain. The answer is A.",
        "B or C",
        "The answer is C. ... The answer is C.",
    ]
    letters = [mcq.cot_letter(o) for o in outputs]
    assert letters == ["C", "A", None, "C"]
    result = mcq.accuracy(letters, ["C"] * 4)
    assert result["accuracy"] == pytest.approx(0.5, abs=E)
    assert result["accuracy_valid"] == pytest.approx(0.666667, abs=E) and result["n_void"] == 1
    assert mcq.cot_letter("the answer is B. The answer is C.") is None
    assert mcq.cot_letter("The answer is C. The answer is C. The answer is C.") is None  # [code]: only two equal
    assert mcq.cot_letter("The answer is E.") is None and mcq.cot_letter("The answer is E.", 5) == "E"


def test_direct_letters():
    cases = {"C": "C", "C.": "C", " C\n": "C", "C. Portugal": "C", "A. x\nB. y": "A", "c": None}
    cases |= {"The answer is C": None, "E": None, "C:": None, "CD": None, "C.Portugal": None, "": None}
    assert {k: mcq.direct_letter(k) for k in cases} == cases
    assert mcq.direct_letter(None) is None and mcq.direct_letter("B", 2) == "B" and mcq.direct_letter("C", 2) is None


def _nkd(logprobs: list[float], raw: bool = False) -> float:
    top = max(logprobs)
    norm = top + math.log(sum(math.exp(x - top) for x in logprobs))
    lp = logprobs if raw else [x - norm for x in logprobs]
    kl = max(0.0, -math.log(len(lp)) - sum(lp) / len(lp))
    return 1 - math.exp(-kl / len(lp))


def test_e5_direct_logprobs_to_score_mcq_record():
    tops = [{"token": t, "logprob": v} for t, v in [("C", -0.05), ("A", -3.2), ("B", -4.0), ("D", -5.0), ("The", -6.1)]]
    record = mcq.prediction("q", "C", top_logprobs=tops, model="m", run="1")
    assert record["logprobs"] == pytest.approx([-3.2, -4.0, -0.05, -5.0], abs=E) and record["letter"] == "C"
    assert {k: record[k] for k in ("id", "model", "run", "strategy", "reason")} == {
        "id": "q",
        "model": "m",
        "run": "1",
        "strategy": "direct",
        "reason": None,
    }
    lp = record["logprobs"]
    p = [math.exp(x) / sum(math.exp(y) for y in lp) for x in lp]
    assert p == pytest.approx([0.040079, 0.018009, 0.935287, 0.006625], abs=E)
    kl = -math.log(4) - sum(math.log(x) for x in p) / 4
    assert kl == pytest.approx(1.693107, abs=E)
    assert _nkd(lp) == pytest.approx(0.345103, abs=E) and _nkd(lp, raw=True) == pytest.approx(0.342330, abs=E)
    assert max(range(4), key=lambda i: lp[i]) == 2  # score-mcq's argmax: C


def test_option_logprobs_merge_variants_and_missing_letters():
    tops = {" C": math.log(0.3), "C": math.log(0.2), "A": -2.0, "\nA": -40.0, "Z": -1.0, "c": -0.1, " ": -3.0}
    out = mcq.option_logprobs(tops)
    assert out[0] == pytest.approx(math.log(math.exp(-2.0) + math.exp(-40.0)), abs=1e-12)
    assert out[1] is None and out[3] is None and out[2] == pytest.approx(math.log(0.5), abs=1e-12)
    assert mcq.option_logprobs([{"token": "A", "logprob": -1e-18}, {"token": " A", "logprob": -1e-18}])[0] <= 0.0
    assert mcq.option_logprobs([{"token": "A", "logprob": float("nan")}, {"bad": 1}]) == [None] * 4
    void = mcq.prediction("q", "I cannot tell", top_logprobs=[{"token": "I", "logprob": -0.1}], fixed_position="B")
    assert (void["letter"], void["logprobs"], void["reason"], void["fixed_position"]) == (None, None, "void", "B")
    cot = mcq.prediction("q", "The answer is B.", strategy="cot", top_logprobs=tops, finish_reason="length")
    assert (cot["letter"], cot["logprobs"], cot["truncated"]) == ("B", None, True)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=30) | st.from_regex(r"\A[A-Z]\.? ?[a-z]*\Z"), st.integers(1, 26))
def test_letter_parsers_stay_inside_the_options(content, k):
    for letter in (
        mcq.direct_letter(content, k),
        mcq.cot_letter(content, k),
        mcq.cot_letter(f"The answer is {content}", k),
    ):
        assert letter is None or letter in mcq.LETTERS[:k]


# --- SynthKGQA (paper 002) ----------------------------------------------------------------------------


def _a1_messages() -> list[str]:
    """The contents of the messages A.1 prints (spec block, JSON-like, real newlines)."""
    return re.findall(r'"content": "(.*?)"\}', fixture("synthkgqa-a1-spec.txt"), re.DOTALL)


def _a1_record() -> dict:
    """A seed-graph record of A.1's printed graph (keys and labels read from its text)."""
    nodes, relations, triples = {}, {}, []
    for piece in writing.A1_EXAMPLE["graph"].split("; "):
        keys = []
        for i, part in enumerate(re.split(r"(?<=\))\s*-\s*", piece)):
            label, key = re.fullmatch(r"(.*) \((\w+)\)", part.strip()).groups()
            (relations if i == 1 else nodes)[key] = label
            keys.append(key)
        triples.append(keys)
    return {
        "sample_id": 5,
        "seed": "Q357932",
        "k": 2,
        "nodes": [{"key": k, "label": v} for k, v in nodes.items()],
        "triples": triples,
        "relations": [{"key": k, "label": v} for k, v in relations.items()],
    }


def test_a1_prompt_verbatim():
    instruction, graph, assistant, last = _a1_messages()
    record = _a1_record()
    messages = writing.prompt(record, examples=[writing.A1_EXAMPLE])
    assert [m["role"] for m in messages] == ["user", "user", "assistant", "user"]
    assert messages[0]["content"] == instruction
    assert messages[1]["content"] == graph and messages[2]["content"] == assistant
    assert last == "Graph: {Q}" and messages[3]["content"] == "Graph: " + writing.graph_line(record)
    assert writing.graph_line(record) == graph[len("Graph: ") :].replace(" - ", "-")
    three = writing.prompt(record, k=3)[0]["content"]
    assert three == instruction.replace("exactly 2 of", "exactly 3 of").replace("all 2 of", "all 3 of")


def test_relation_labels_from_the_flattened_text():
    record = _a1_record()
    relations = {r["key"]: r["label"] for r in record.pop("relations")}
    names = {n["key"]: f"{n['label']} ({n['key']})" for n in record["nodes"]}
    record["flattened"] = ";".join(f"{names[h]}-{relations[r]} ({r})-{names[t]}" for h, r, t in record["triples"])
    assert writing.relation_labels(record) == relations
    assert writing.relation_labels({**record, "flattened": "x"}) == dict.fromkeys(relations)
    assert writing.relation_labels(record, {"P17": "land"})["P17"] == "land"  # given labels before flattened
    assert writing.relation_labels({**record, "relations": [{"key": "P17", "label": "nation"}]})["P17"] == "nation"


def test_e3_parse_and_gt_questions_type():
    out = writing.parse(_a1_messages()[2], _a1_record())
    assert out["reason"] is None
    assert out["question"] == "In which country did Francisco José Fernandes Costa die?"
    assert (out["seeds"], out["answer"]) == (["Q357932"], "Q45")
    assert out["answer_subgraph"] == [["Q357932", "P20", "Q428459"], ["Q428459", "P17", "Q45"]]
    constants = {x for s, _, o in out["sparql_triples"] for x in (s, o) if not x.startswith("?")}
    assert constants == set(out["seeds"]) and out["answer_variable"] == "?answer"
    verdict = answer_types.classify(out["seeds"], out["answer"], out["answer_subgraph"])
    assert (verdict.type.graph_isomorphism, verdict.type.n_hops) == ("(2)", 2)
    spaced = writing._Resolver(_a1_record(), None).triple("Figueira da Foz (Q428459) - country (P17) - Portugal (Q45)")
    plain = writing._Resolver(_a1_record(), None).triple("Figueira da Foz (Q428459)-country (P17)-Portugal (Q45)")
    assert spaced == plain == (("Q428459", "P17", "Q45"), [])


GOOD_ANSWER = (
    "Question: In which country did Francisco José Fernandes Costa die?\n"
    "Nodes mentioned in the question: Francisco José Fernandes Costa (Q357932)\n"
    "Answer: Portugal (Q45)\n"
    "Triples used: Francisco José Fernandes Costa (Q357932)-place of death (P20)-Figueira da Foz (Q428459); "
    "Figueira da Foz (Q428459)-country (P17)-Portugal (Q45)\n"
    "SPARQL query: SELECT ?answer WHERE {wd:Q357932 wdt:P20 ?place . ?place wdt:P17 ?answer.}"
)


@pytest.mark.parametrize(
    "content, reason",
    [
        (GOOD_ANSWER, None),
        ("Sure! Here it is.\n\n**Question:** x?\n" + GOOD_ANSWER.split("\n", 1)[1] + "\nThis query works.", None),
        (GOOD_ANSWER.replace("SPARQL query: ", "SPARQL query:\n```sparql\n") + "\n```\nHope this helps.", None),
        (GOOD_ANSWER.replace("(Q45)\n", "(Q45).\n").replace("(Q357932)\n", "(Q357932),\n"), None),
        (GOOD_ANSWER.replace("-country (P17)-", "-country-"), None),  # relation by its label ([code] few-shots)
        (GOOD_ANSWER.replace("Answer: Portugal (Q45)", "Answer: Portugal"), None),  # entity by its label
        (GOOD_ANSWER.replace("{", "{ SERVICE wikibase:label { bd:serviceParam wikibase:language 'en'. } "), None),
        ("PREFIX wd: <http://www.wikidata.org/entity/>\n" + GOOD_ANSWER, None),
        (GOOD_ANSWER.rsplit("\n", 1)[0], "missing_field"),
        (GOOD_ANSWER.replace("Answer: Portugal (Q45)", "Answer:"), "missing_field"),
        ("", "missing_field"),
        (
            GOOD_ANSWER.replace("Figueira da Foz (Q428459)-country (P17)-Portugal (Q45)", "Figueira da Foz"),
            "malformed_triple",
        ),
        (GOOD_ANSWER.replace("Answer: Portugal (Q45)", "Answer: Portugal Republic"), "unresolved_entity"),
        (GOOD_ANSWER.replace("-country (P17)-", "-land-"), "unresolved_relation"),
        (GOOD_ANSWER.replace("Portugal (Q45)\n", "Spain (Q29)\n"), "node_not_in_seed_graph"),
        (GOOD_ANSWER.replace("country (P17)-Portugal", "capital (P36)-Portugal"), "triple_not_in_seed_graph"),
        (GOOD_ANSWER.replace("?place wdt:P17", "?place wdt:P17/wdt:P131*"), "unsupported_sparql"),
        (GOOD_ANSWER.replace("?answer.}", "?answer. FILTER(?answer != wd:Q1)}"), "unsupported_sparql"),
        (GOOD_ANSWER.replace("?answer.}", "?answer. OPTIONAL { ?answer wdt:P1 ?y }}"), "unsupported_sparql"),
        (GOOD_ANSWER.replace("?answer.}", '?answer. ?answer wdt:P1 "x".}'), "unsupported_sparql"),
        (GOOD_ANSWER + " LIMIT 1", "unsupported_sparql"),
        (GOOD_ANSWER.replace("SELECT ?answer", "SELECT ?answer ?place"), "unsupported_sparql"),
        (GOOD_ANSWER.replace("wd:Q357932", "wd:Q4294919"), "sparql_seed_mismatch"),
        # several problems: the first of REASONS wins
        (
            GOOD_ANSWER.replace("Answer: Portugal (Q45)", "Answer: Nowhere").replace("{", "{ FILTER"),
            "unresolved_entity",
        ),
    ],
)
def test_parse_malformed_outputs(content, reason):
    out = writing.parse(content, _a1_record())
    assert out["reason"] == reason, out["detail"]
    if reason is None:
        assert (out["seeds"], out["answer"], len(out["answer_subgraph"])) == (["Q357932"], "Q45", 2)


def test_truncated_output_is_flagged_and_rejected():
    cut = GOOD_ANSWER[: GOOD_ANSWER.index("?place wdt:P17")]
    out = writing.parse(cut, _a1_record(), finish_reason="length")
    assert out["truncated"] and out["reason"] == "unsupported_sparql"
    out = writing.parse(GOOD_ANSWER[:100], _a1_record(), finish_reason="length")
    assert out["truncated"] and out["reason"] == "missing_field"


def test_example_from_a_question_by_key():
    record = _a1_record()
    question = {
        "seeds": ["Q357932"],
        "answer": "Q45",
        "answer_subgraph": [["Q357932", "P20", "Q428459"], ["Q428459", "P17", "Q45"]],
    }
    shot = writing.example(record, question, writing.A1_EXAMPLE["question"])
    assert {k: shot[k] for k in ("question", "nodes", "answer", "triples")} == {
        k: writing.A1_EXAMPLE[k] for k in ("question", "nodes", "answer", "triples")
    }
    assert shot["sparql"] == "SELECT ?answer WHERE {wd:Q357932 wdt:P20 ?a. ?a wdt:P17 ?answer.}"
    assert writing.parse(writing.assistant_text(shot), record)["reason"] is None


# --- SynthKGQA answering (E4) -------------------------------------------------------------------------


def test_e4_reader_prompt_and_scores():
    record = {
        "question": "In which country did Francisco José Fernandes Costa die?",
        "triples": [
            ["Francisco José Fernandes Costa", "place of death", "Figueira da Foz"],
            ["Figueira da Foz", "country", "Portugal"],
        ],
    }
    messages = gtsqa.prompt(record, context="gt")
    assert messages == [
        {"role": "system", "content": "You are an AI assistant that helps people find information."},
        {"role": "user", "content": fixture("synthkgqa-answer-e4.txt")},
    ]
    io = gtsqa.prompt(record, context="none")
    assert (
        len(io) == 9
        and io[1]["content"] == "Answer: {Washington, D.C.}."
        and io[-1]["content"].startswith("Question: In")
    )
    cases = {
        "Portugal.": (1, 1),
        "The answer is Portugal.": (1, 0),
        "The answer is {Portugal}.": (1, 1),
        "{Portugal (Q45)}": (1, 0),
        "{Yes}. The answer is Spain.": (0, 0),
        "": (0, 0),
    }
    for output, (hit, strict) in cases.items():
        scores = gtsqa.answer_scores(output, ["Portugal"])
        assert (scores["em_hits"], scores["em_strict_hits"]) == (hit, strict), output
    assert gtsqa.answer_text("The answer is {Portugal}.") == "Portugal"
    assert gtsqa.answer_text("{Yes}. ok") == "{Yes}. ok"
    scores = gtsqa.answer_scores("Fernando Cerchio", ["Fernando Cerchio", "Henri Decoin"])
    assert (scores["em_hits"], scores["em_recall"]) == (1, 0.5)
    t1, t2 = (
        ("Francisco José Fernandes Costa", "place of death", "Figueira da Foz"),
        ("Figueira da Foz", "country", "Portugal"),
    )
    retrieval = [t1, ("Lisbon", "country", "Portugal"), ("x", "r", "y"), ("z", "r", "w")]
    scores = gtsqa.retrieval_scores(retrieval, [t1, t2], ["Portugal"])
    expected = {
        "gt_recall": 0.5,
        "gt_precision": 0.25,
        "gt_f1": 0.333333,
        "answer_hits": 1,
        "answer_recall": 1,
        "size": 4,
    }
    assert scores == pytest.approx(expected, abs=E)
    assert gtsqa.retrieval_scores([], [t1], ["Portugal"])["gt_f1"] == 0.0


# --- OKGQA (paper 004) --------------------------------------------------------------------------------


def test_e6_prizes_triplets_and_facts_line():
    nodes = okgqa.prizes(okgqa.rank({"Aristotle": 0.9, "Alexander_the_Great": 0.8, "Plato": 0.7, "Rome": 0.1}), 3)
    relations = okgqa.prizes(["influencedBy", "wikiPageWikiLink"], 3)
    assert nodes == {"Aristotle": 3, "Alexander_the_Great": 2, "Plato": 1} and relations == {
        "influencedBy": 3,
        "wikiPageWikiLink": 2,
    }
    triples = [
        ("Aristotle", "wikiPageWikiLink", "Plato"),
        ("Rome", "type", "Plato"),
        ("Alexander_the_Great", "influencedBy", "Aristotle"),
    ]
    top = okgqa.top_triplets(triples, nodes, relations, 2)
    assert top == [triples[2], triples[0]] and [okgqa.triplet_prize(t, nodes, relations) for t in top] == [8, 6]
    assert okgqa.facts_line(top) == (
        "('Alexander_the_Great', 'influencedBy', 'Aristotle'), ('Aristotle', 'wikiPageWikiLink', 'Plato')"
    )
    assert (
        okgqa.entity_name("Alexander the Great", "Q8409") == "Alexander_the_Great"
        and okgqa.entity_name("", "Q1") == "Q1"
    )
    assert okgqa.cosine([1, 0], [1, 1]) == pytest.approx(math.sqrt(0.5)) and okgqa.cosine([0, 0], [1, 1]) == 0.0


def test_a11_prompt_with_example_1_verbatim():
    spec = fixture("okgqa-a11-spec.txt").rstrip("\n").split("\n")
    paper = [p for p in fixture("okgqa-example1.txt").split("\n") if p]
    record = {
        "qid": "q",
        "question": "Who taught Alexander?",
        "facts": [("Alexander_the_Great", "influencedBy", "Aristotle")],
    }
    messages = okgqa.prompt(record)
    assert messages[0] == {"role": "system", "content": spec[0][len('System Instruction: "') : -1]}
    assert messages[1] == {"role": "user", "content": "\n".join(paper[:2]) + "\nAnswer:"}
    assert messages[2] == {"role": "assistant", "content": paper[2][len("Answer: ") :]}
    for printed in spec[2:5]:  # the spec's elided lines are prefixes of the paper's
        head = printed.split("[...]")[0]
        assert any(line.startswith(head.rstrip()) for line in paper)
    expected_last = "\n".join(spec[-3:]).replace("{Question}", record["question"])
    assert messages[3]["content"] == expected_last.replace("{Retrieved-knowledge}", okgqa.facts_line(record["facts"]))
    assert len(messages) == 4


def test_okgqa_baselines_cot_and_self_consistency():
    zero = okgqa.prompt({"question": "Why?"})
    assert [m["role"] for m in zero] == ["system", "user"] and zero[1]["content"] == "Question: Why?\nAnswer:"
    shots = [okgqa.EXAMPLE_1, {"question": "Q2?", "answer": "A2."}]
    four = okgqa.prompt({"question": "Why?"}, examples=shots)
    assert (
        four[1]["content"] == "Question: " + okgqa.EXAMPLE_1["question"] + "\nAnswer:" and four[4]["content"] == "A2."
    )
    cot = okgqa.prompt({"question": "Why?", "facts": []}, examples=[], cot=True)
    assert cot[-1]["content"].endswith("question: \nAnswer: Let's think step by step.")
    sc = okgqa.sc_select_prompt("Why?", ["a", "b"])[0]["content"]
    assert sc.endswith("Quersion:\nWhy?\n\nGenerated Answers:\nAnswer\n: a\nAnswer\n: b\n\n\nAnswer:\n")


def test_e6_judges():
    assert okgqa.factscore(6, 8) == pytest.approx(0.75, abs=E)
    assert okgqa.factscore(6, 8, gamma=10) == pytest.approx(0.584101, abs=E)
    assert okgqa.factscore(6, 12, gamma=10) == 0.5 and okgqa.factscore(0, 0) is None
    summary = okgqa.factscore_summary([0.75, 0.5, None])
    assert summary["factscore"] == pytest.approx(0.625, abs=E) and summary["pct_responding"] == pytest.approx(
        66.7, abs=0.05
    )
    assert summary["n_responding"] == 2
    assert okgqa.geval_percent([okgqa.geval_score("Steps: ...\nScore: 7")]) == pytest.approx(70.0, abs=E)
    assert okgqa.geval_score("Score: 3\n...\n**Score:** 9/10") == 9 and okgqa.geval_score("Score: 11") is None
    assert okgqa.geval_score("no score") is None and okgqa.geval_percent([None]) is None
    assert 0.625 - 0.55 == pytest.approx(0.075, abs=E)  # g(G) - g(G') of FActScore under ED at level 0.4


def test_a3_geval_prompt_verbatim():
    criteria = fixture("okgqa-a3-criteria.txt").rstrip("\n").split("\n")
    assert list(okgqa.CRITERIA.values()) == criteria
    record = {"question": "Q?", "answer": "A.", "passages": ["p1", "p2"]}
    messages = okgqa.geval_prompt(record, "correctness")
    instruction = (
        "You are a helpful assistant designed to evaluate the quality of the response to a query. Your task is to "
        "rate the response on one metric defined as below:"
    )
    assert messages[0] == {"role": "system", "content": instruction + "\n" + criteria[2]}
    assert messages[1]["content"].startswith("Input: Q?\n\nActual Output: A.\n\nRetrieval Context: p1\n\np2\n\n")
    with pytest.raises(ValueError, match="criterion"):
        okgqa.geval_prompt(record, "fluency")


def test_okgqa_abstention():
    assert okgqa.parse("I don't know.")["abstained"] and okgqa.parse("")["reason"] == "abstained"
    assert okgqa.parse("I'm sorry, but I cannot answer that.")["abstained"]
    long = "I'm sorry for the delay. " + "Blockchain helps. " * 20
    assert not okgqa.parse(long)["abstained"] and not okgqa.parse("Blockchain can help.")["abstained"]
    assert okgqa.parse("x", finish_reason="length")["truncated"]
