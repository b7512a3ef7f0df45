"""The rule model: AMIE3 syntax, canonical form, BRINK rule types, AMIE3 TSV import/export, and AMIE3's
output selection (reachability, thresholds, skyline) on hand-made candidates. No Spark."""

from __future__ import annotations

import gzip

import pytest

from kgbrink.rules.mining import MiningParams
from kgbrink.rules.model import (
    Atom,
    Rule,
    RuleSyntaxError,
    amie_tsv_lines,
    parse_rule,
    read_amie_tsv,
    rule_from_row,
    rule_row,
    write_amie_tsv,
)
from kgbrink.rules.plan import body_shapes
from kgbrink.rules.selection import amie_selection
from kgbrink.rules.supports import min_support_count


def test_parse_and_print_amie_syntax():
    text = "?a  r1  ?e  ?e  r2  ?b   => ?a  r3  ?b"
    rule = parse_rule(text)
    assert rule.head == Atom("r3", "?a", "?b")
    assert rule.body == (Atom("r1", "?a", "?e"), Atom("r2", "?e", "?b"))
    assert rule.text() == text
    assert rule.length == 3
    # any whitespace between elements; the example with ?c as the head object
    assert parse_rule("?a r1 ?b\t?b r2 ?c => ?a r3 ?c").key() == text


def test_canonical_form_ignores_variable_names_and_atom_order():
    one = parse_rule("?z  r2  ?y  ?x  r1  ?z   => ?x  r3  ?y")
    two = parse_rule("?a  r1  ?g  ?g  r2  ?b   => ?a  r3  ?b")
    assert one.key() == two.key() == "?a  r1  ?e  ?e  r2  ?b   => ?a  r3  ?b"
    assert one.rule_id() == two.rule_id() and len(one.rule_id()) == 16
    # two fresh variables: the smaller printing among renamings wins, whatever the input names
    a = parse_rule("?a  p  ?f  ?f  q  ?e  ?e  s  ?b   => ?a  r  ?b")
    b = parse_rule("?a  p  ?k  ?k  q  ?m  ?m  s  ?b   => ?a  r  ?b")
    assert a.key() == b.key() == "?a  p  ?e  ?e  q  ?f  ?f  s  ?b   => ?a  r  ?b"
    assert parse_rule("?b  q  ?a   => ?a  r  ?b").key() != parse_rule("?a  q  ?b   => ?a  r  ?b").key()


@pytest.mark.parametrize(
    "text, expected",
    [
        ("?b  r  ?a   => ?a  r  ?b", "symmetry"),
        ("?b  s  ?a   => ?a  r  ?b", "inversion"),
        ("?a  s  ?b   => ?a  r  ?b", "hierarchy"),
        ("?a  p  ?e  ?e  q  ?b   => ?a  r  ?b", "composition"),
        ("?a  r  ?e  ?e  r  ?b   => ?a  r  ?b", "composition"),  # transitivity
        ("?e  p  ?a  ?e  q  ?b   => ?a  r  ?b", "other"),  # chain with a reversed atom
        ("?a  p  ?e  ?b  q  ?e   => ?a  r  ?b", "other"),
        ("?a  p  ?b  ?a  q  ?b   => ?a  r  ?b", "other"),  # intersection
        ("?a  p  ?e  ?e  q  ?f  ?f  s  ?b   => ?a  r  ?b", "other"),  # longer chain
    ],
)
def test_rule_types_of_brink_table_1(text, expected):
    assert parse_rule(text).rule_type() == expected


@pytest.mark.parametrize(
    "text, problem",
    [
        ("?a  p  ?e   => ?a  r  ?b", "not closed"),
        ("?a  r  ?b   => ?a  r  ?b", "head atom"),
        ("?a  p  ?b  ?e  q  ?f  ?e  s  ?f   => ?a  r  ?b", "not connected"),
        ("?a  p  ?a  ?a  q  ?b   => ?a  r  ?b", "repeats a variable"),
        ("?a  p  ?b  ?a  p  ?b   => ?a  r  ?b", "repeated"),
        ("?a  p  Q42   => ?a  r  ?b", "constants"),
        ("?a  p  ?b   => ?a  r  ?b  => ?a  s  ?b", "exactly one"),
        ("?a  p   => ?a  r  ?b", "atoms"),
        ("   => ?a  r  ?b", "atoms"),
    ],
)
def test_invalid_rules_are_rejected_with_the_reason(text, problem):
    with pytest.raises(RuleSyntaxError, match=problem):
        parse_rule(text)


AMIE3_OUTPUT = """Using HeadCoverage as pruning metric with minimum threshold 0.1
Using recursivity limit 3
Default mining assistant that defines support by counting support on both head variables
Filtering on PCA confidence with minimum threshold 0.4
Constants in the arguments of relations are disabled
Lossless (query refinement) heuristics enabled
MRT calls: 42
Rule\tHead Coverage\tStd Confidence\tPCA Confidence\tPositive Examples\tBody size\tPCA Body size\tFunctional variable
?b  wife_of  ?a   => ?a  husband_of  ?b\t0.633193863\t0.638537271\t0.927346939\t454\t711\t490\t?a
?a  father_of  ?h  ?h  mother_of  ?b   => ?a  husband_of  ?b\t0.369596931\t0.648\t0.964\t265\t409\t275\t?b
Mining done in 1.2 s
Total time 2.5 s
2 rules mined.
"""

AMIE35_OUTPUT = """Rule\tHead Coverage\tStandard Confidence\tPca Confidence\tSupport\tBody Size\tPca Body Size\tFunctional Variable
?b  wife_of  ?a   => ?a  husband_of  ?b\t0,633194\t0,638537\t0,927347\t454\t711\t490\t-1
Search space size: 1234
"""


def test_amie3_tsv_import_skips_log_lines_and_reads_metrics(tmp_path):
    path = tmp_path / "amie.tsv"
    path.write_text(AMIE3_OUTPUT)
    rules = read_amie_tsv(path)
    assert [r.rule_type() for r in rules] == ["inversion", "composition"]
    m = rules[0].metrics
    assert (m["support"], m["body_size"], m["pca_body_size"], m["functional_variable"]) == (454, 711, 490, "?a")
    assert m["pca_confidence"] == pytest.approx(0.927346939)
    assert rules[1].metrics["functional_variable"] == "?b"


def test_amie35_header_spelling_decimal_comma_and_integer_variable_codes(tmp_path):
    path = tmp_path / "amie35.tsv"
    path.write_text(AMIE35_OUTPUT)
    (rule,) = read_amie_tsv(path)
    assert rule.metrics["functional_variable"] == "?a"
    assert rule.metrics["head_coverage"] == pytest.approx(0.633194)
    assert rule.metrics["support"] == 454


@pytest.mark.parametrize(
    "row, message",
    [
        ("?a  p  ?b   => ?a  r  ?b\t0.5\t0.5\t0.5\tmany\t2\t2\t?a", "Positive Examples"),
        ("?a  p  ?b   => ?a  r  ?b\t0.5\t1.5\t0.5\t1\t2\t2\t?a", r"\[0, 1\]"),
        ("?a  p  ?b   => ?a  r  ?b\t0.5\t0.5\t0.5\t1\t2\t2\t?e", "functional variable"),
        ("?a  p  ?e   => ?a  r  ?b\t0.5\t0.5\t0.5\t1\t2\t2\t?a", "not closed"),
        ("?a  p  ?b   => ?a  r  ?b\t0.5\t0.5", "columns"),
        ("?a  p  ?b   => ?a  r  ?b\t0.5\t0.5\t0.5\t1.5\t2\t2\t?a", "whole number"),
    ],
)
def test_bad_tsv_rows_name_file_and_line(tmp_path, row, message):
    path = tmp_path / "bad.tsv"
    header = AMIE3_OUTPUT.splitlines()[7]
    path.write_text(f"log line\n{header}\n{row}\n")
    with pytest.raises(RuleSyntaxError, match=message) as err:
        read_amie_tsv(path)
    assert f"{path}:3" in str(err.value)


def test_tsv_without_header_or_with_duplicate_rules_fails(tmp_path):
    path = tmp_path / "none.tsv"
    path.write_text("just a log\n")
    with pytest.raises(RuleSyntaxError, match="no AMIE3 header"):
        read_amie_tsv(path)
    dup = tmp_path / "dup.tsv"
    lines = AMIE3_OUTPUT.splitlines()
    renamed = lines[8].replace("?b", "?x").replace("?a", "?b").replace("?x", "?a").replace("\t?b", "\t?a")
    dup.write_text("\n".join([lines[7], lines[8], renamed]) + "\n")
    with pytest.raises(RuleSyntaxError, match="same rule as line 2"):
        read_amie_tsv(dup)


def test_export_import_round_trip_and_table_rows(tmp_path):
    source = tmp_path / "in.tsv"
    source.write_text(AMIE3_OUTPUT)
    rules = read_amie_tsv(source)
    out = tmp_path / "out.tsv"
    write_amie_tsv(rules, out)
    again = read_amie_tsv(out)
    assert [r.key() for r in again] == [r.key() for r in rules]
    packed = tmp_path / "out.tsv.gz"
    packed.write_bytes(gzip.compress(out.read_bytes()))
    assert [(r.key(), r.metrics) for r in read_amie_tsv(packed)] == [(r.key(), r.metrics) for r in rules]
    assert [r.metrics for r in again] == [r.metrics for r in rules]
    assert amie_tsv_lines(again) == amie_tsv_lines(rules)
    rows = [rule_row(r) for r in rules]
    assert rows[1]["rule"] == "?a  father_of  ?e  ?e  mother_of  ?b   => ?a  husband_of  ?b"
    assert rows[1]["rule_type"] == "composition" and rows[1]["length"] == 3
    back = [rule_from_row(row) for row in rows]
    assert [r.key() for r in back] == [r.key() for r in rules]
    assert back[0].metrics["functional_variable"] == "?a"


def test_body_shapes_are_every_closed_connected_pattern():
    counts = {}
    for shape in body_shapes(4):
        counts[shape.length] = counts.get(shape.length, 0) + 1
    # hand count for length 3: chains x-z-y in 4 orientations, and 3 two-atom patterns on (x, y)
    assert counts[2] == 2 and counts[3] == 7
    assert counts[4] == len({s.atoms for s in body_shapes(4) if s.length == 4})


def test_min_support_count_uses_amie_arithmetic():
    p = MiningParams(min_head_coverage=0.1)
    assert min_support_count(1866, p) == 187  # ceil(186.6)
    assert min_support_count(100, MiningParams(min_head_coverage=0.07)) == 8  # AMIE's ceil(7.000000000000001)
    assert min_support_count(10, MiningParams(min_head_coverage=0.01, min_support=5)) == 5


def _rule(text: str, support: int, body: int, pca_body: int) -> Rule:
    r = parse_rule(text)
    return Rule(
        r.head, r.body, {"support": support, "body_size": body, "pca_body_size": pca_body, "functional_variable": "?a"}
    )


def test_amie_selection_thresholds_and_skyline():
    params = MiningParams(min_head_coverage=0.1, min_std_confidence=0.3, min_pca_confidence=0.4)
    parent = _rule("?a  p  ?b   => ?a  r  ?b", 50, 100, 80)  # std 0.5, pca 0.625: output
    better = _rule("?a  p  ?b  ?a  q  ?b   => ?a  r  ?b", 40, 50, 60)  # pca 0.667 > 0.625: output
    worse = _rule("?a  p  ?b  ?b  s  ?a   => ?a  r  ?b", 30, 60, 48)  # pca 0.625 == parent: rejected (strict)
    low_std = _rule("?a  q  ?e  ?e  s  ?b   => ?a  r  ?b", 30, 101, 40)  # std 0.297 < 0.3
    low_pca = _rule("?a  s  ?e  ?e  q  ?b   => ?a  r  ?b", 30, 70, 76)  # pca 0.395 < 0.4
    kept = {r.key() for r in amie_selection([parent, better, worse, low_std, low_pca], params)}
    assert kept == {parent.key(), better.key()}


def test_a_closed_parent_below_min_std_confidence_does_not_prune():
    # Issue 27, PROBE umls (train + valid + test), functional variable ?b; the counts were taken from the
    # KG with pandas (disrupts: 154 facts). AMIE computes the PCA confidence of a rule only when its std
    # confidence reaches -minc, so the parent at std 70/263 = 0.266 < 0.3 keeps PCA confidence 0 and the
    # child (PCA 70/77 = 0.909, equal to the parent's would-be PCA 70/77) is output, as AMIE 3 outputs it.
    params = MiningParams(min_head_coverage=0.1, min_std_confidence=0.3, min_pca_confidence=0.4)
    complicates = _rule("?a  complicates  ?b   => ?a  disrupts  ?b", 70, 263, 77)  # std 0.266, pca 0.909
    affects = _rule("?a  affects  ?b   => ?a  disrupts  ?b", 70, 1022, 348)  # std 0.068, pca 0.201
    child = _rule("?a  affects  ?b  ?a  complicates  ?b   => ?a  disrupts  ?b", 70, 184, 77)  # std 0.380
    kept = amie_selection([complicates, affects, child], params)
    assert [r.key() for r in kept] == [child.key()]
    assert kept[0].metrics["std_confidence"] == 70 / 184 and kept[0].metrics["pca_confidence"] == 70 / 77
    # the same parent at std 0.3 (body 233) has its PCA confidence computed, and 70/77 <= 70/77 prunes
    confident = _rule("?a  complicates  ?b   => ?a  disrupts  ?b", 70, 233, 77)
    assert [r.key() for r in amie_selection([confident, affects, child], params)] == [confident.key()]


def test_perfect_rules_are_not_refined():
    params = MiningParams(min_head_coverage=0.1, min_std_confidence=0.5, min_pca_confidence=0.0)
    perfect = _rule("?a  p  ?b   => ?a  r  ?b", 50, 100, 50)  # std 0.5, pca 1.0: output, not refined
    other = _rule("?a  q  ?b   => ?a  r  ?b", 45, 90, 60)  # std 0.5, pca 0.75: output and refined
    child = _rule("?a  p  ?b  ?a  q  ?b   => ?a  r  ?b", 44, 44, 44)  # reached through q; pca 1.0 <= p's
    kept = {r.key() for r in amie_selection([perfect, other, child], params)}
    assert kept == {perfect.key(), other.key()}
    # a perfect parent below -minc is no perfect rule for AMIE (its PCA confidence is never computed): it
    # is refined, so a child whose parents are all such rules is generated, and they do not prune it
    # (before issue 27 kgbrink found the child unreachable and dropped it)
    low_p = _rule("?a  p  ?b   => ?a  r  ?b", 50, 200, 50)  # std 0.25, pca 1.0
    low_q = _rule("?a  q  ?b   => ?a  r  ?b", 45, 180, 45)  # std 0.25, pca 1.0
    assert {r.key() for r in amie_selection([low_p, low_q, child], params)} == {child.key()}


def test_mining_params_default_to_the_mining_settings():
    from dataclasses import fields

    from kgbrink.core.settings import MiningSettings

    settings = MiningSettings()
    assert {f.name: getattr(MiningParams(), f.name) for f in fields(MiningParams)} == {
        f.name: getattr(settings, f.name) for f in fields(MiningParams)
    }
    assert MiningParams().min_std_confidence == 0.3
