"""SAFE's pieces (kgbrink.okgqa.safe; paper 004 §3.3, spec 5.3): its two prompts, the query and verdict
parsers on any text, the KG search's BM25 by hand, the pluggable search's resolution (no Spark)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgbrink.evaluation import templates as builtin_templates
from kgbrink.okgqa import safe


def test_prompts_show_the_results_so_far_or_na():
    first = safe.search_prompt("Plato taught Aristotle.", [])
    assert [m["role"] for m in first] == ["user"]
    assert first[0]["content"].endswith("KNOWLEDGE:\nN/A\n\nSTATEMENT:\nPlato taught Aristotle.")
    assert "issue ONE Google Search query" in first[0]["content"]
    later = safe.search_prompt("s", ["r1 a\nr1 b", "r2"])[0]["content"]
    assert later.endswith("KNOWLEDGE:\nr1 a\nr1 b\nr2\n\nSTATEMENT:\ns")
    final = safe.final_prompt("s", [])[0]["content"]
    assert final.endswith("KNOWLEDGE:\nN/A\n\nSTATEMENT:\ns") and '"Supported" or "Not Supported"' in final
    assert safe.final_prompt("s", ["r1", safe.NO_RESULT])[0]["content"].endswith(
        f"KNOWLEDGE:\nr1\n{safe.NO_RESULT}\n\nSTATEMENT:\ns"
    )
    # reachable by name, SAFE's request settings as their defaults
    assert builtin_templates.builtin("okgqa-safe-final").params == {"temperature": 0.1, "max_tokens": 512}
    assert "okgqa-safe-search@1" in builtin_templates.names()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("Search:\n```\nPlato student Aristotle\n```", "Plato student Aristotle"),
        ("```text\nq1\n```, then ```q2```", "q1"),
        ("```q3```", "q3"),
        ("no block", None),
        ("```   ```", None),
        ("``` unclosed", None),
        (None, None),
    ],
)
def test_the_query_is_the_first_code_block(content, expected):
    assert safe.query(content) == expected


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("so [Supported].", True),
        ("final: [not  supported]", False),
        ("[Not Supported.] then [Supported]", False),
        ("[SUPPORTED!]", True),
        ("[maybe] [Supported]", None),  # the first brackets decide, as in SAFE
        ("Supported", None),
        ("", None),
    ],
)
def test_the_verdict_is_the_first_square_brackets(content, expected):
    assert safe.verdict(content) == expected


@settings(max_examples=200, deadline=None)
@given(text=st.text())
def test_the_parsers_take_any_text(text):
    found = safe.query(text)
    assert found is None or (found == found.strip() and found)
    assert safe.verdict(text) in (True, False, None)
    assert safe.verdict(f"{text}") == safe.verdict(text)


def test_kg_search_is_bm25_by_hand():
    """Three documents of 3, 5 and 7 words, query "plato aristotle": "plato" in 2 documents, idf = ln(1 +
    1.5/2.5); "aristotle" in 1, idf = ln(1 + 2.5/1.5). Document 0 has both once, document 2 only "plato",
    document 1 neither (left out)."""
    docs = [
        "('Plato', 'taught', 'Aristotle')",
        "('Rome', 'capitalOf', 'Italy', 'x', 'y')",
        "Plato lived in Athens a long time",
    ]
    idf_plato, idf_aristotle = math.log(1 + 1.5 / 2.5), math.log(1 + 2.5 / 1.5)

    def term(tf, length):
        return tf * 2.5 / (tf + 1.5 * (0.25 + 0.75 * length / 5))

    doc0 = idf_plato * term(1, 3) + idf_aristotle * term(1, 3)
    doc2 = idf_plato * term(1, 7)
    assert doc0 > doc2 > 0
    assert [round(doc0, 6), round(doc2, 6)] == [round(safe.bm25("plato aristotle", docs)[i], 6) for i in (0, 2)]
    assert safe.kg_search("Plato? Aristotle!", docs, 3) == [docs[0], docs[2]]
    assert safe.kg_search("plato aristotle", docs, 1) == [docs[0]]
    assert safe.kg_search("zeno", docs, 3) == [] and safe.kg_search("plato", [], 3) == []
    # equal scores: document order
    assert safe.kg_search("a", ["a b", "b a", "c"], 2) == ["a b", "b a"]


@settings(max_examples=100, deadline=None)
@given(
    docs=st.lists(st.text(alphabet="abc d", max_size=12), max_size=8),
    query=st.text(alphabet="abc d", max_size=6),
    k=st.integers(1, 4),
)
def test_kg_search_returns_at_most_k_documents_sharing_a_word(docs, query, k):
    found = safe.kg_search(query, docs, k)
    words = set(query.split())
    assert len(found) <= k and all(doc in docs and words & set(doc.split()) for doc in found)
    sharing = [doc for doc in docs if words & set(doc.split())]
    assert len(found) == min(k, len(sharing))


def test_the_search_is_kg_or_an_importable_function():
    assert safe.resolve_search("kg") is safe.kg_search
    assert safe.resolve_search("kgbrink.okgqa.safe:kg_search") is safe.kg_search
    with pytest.raises(ValueError, match="must be 'kg' or 'module:function'"):
        safe.resolve_search("google")
    with pytest.raises(ValueError, match="No module named 'no_such_module'"):
        safe.resolve_search("no_such_module:search")
    with pytest.raises(ValueError, match="has no attribute 'nothing'"):
        safe.resolve_search("kgbrink.okgqa.safe:nothing")
    with pytest.raises(ValueError, match="a job module is not a search"):
        safe.resolve_search("kgbrink.jobs.build:build")
    with pytest.raises(ValueError, match="is not callable"):
        safe.resolve_search("kgbrink.okgqa.safe:SUPPORTED")
