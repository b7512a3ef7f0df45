"""Rule mining and grounding on Spark: hand-computed metrics (both PCA functional variables), an
independent brute-force miner on seeded random graphs, BRINK Table 1 on the real Family KG, the rules
table and AMIE3 TSV round trip through the jobs, groundings and their seeded samples."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import Window
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from kgbrink.core.jobs import JobContext
from kgbrink.core.session import session_setting
from kgbrink.rules import grounding, mining, plan, supports
from kgbrink.rules.model import Atom, Rule, parse_rule, read_amie_tsv
from tests import graphs

FIXTURES = Path(__file__).parent / "fixtures"

# --- the hand-built KG graphs.SOCIAL --------------------------------------------------------------------
# likes: 3 facts, subjects {1, 4}, objects {2, 3, 5}: functionality 2/3 < 3/3 -> functional variable ?b.
# bornIn: 3 facts, subjects {1, 2, 3}, objects {10, 11}: 1 >= 2/3 -> functional variable ?a.


def _triples(spark, graph: dict[str, list[tuple[int, int]]], relation_ids: dict[str, int]):
    rows = [(h, relation_ids[r], t) for r, pairs in graph.items() for h, t in pairs]
    return spark.createDataFrame(rows, "h int, r int, t int")


# --- an independent brute-force miner (definitions of BRINK App. B.1, enumerating substitutions) -------


def _brute_force(graph: dict[str, list[tuple[int, int]]], max_atoms: int = 3) -> dict[str, tuple]:
    """Every closed rule with at most ``max_atoms`` atoms (a relation at most 3 times) and support >= 1
    over the relations of ``graph``: canonical key -> (support, body size, PCA body size, functional
    variable), by backtracking over the facts of each body atom (variables may bind the same entity)."""
    facts = {r: set(p) for r, p in graph.items()}
    variables = ("?a", "?b", "?e", "?f")[:max_atoms]
    atoms = [Atom(r, s, o) for r in facts for s in variables for o in variables if s != o]

    def body_pairs(body) -> set:
        envs = [{}]
        for atom in body:
            envs = [
                {**env, atom.subject: s, atom.object: o}
                for env in envs
                for s, o in facts[atom.relation]
                if env.get(atom.subject, s) == s and env.get(atom.object, o) == o
            ]
        return {(env["?a"], env["?b"]) for env in envs}

    out = {}
    for head_rel, head_facts in facts.items():
        head = Atom(head_rel, "?a", "?b")
        subjects = {s for s, _ in head_facts}
        objects = {o for _, o in head_facts}
        functional = "?a" if len(subjects) >= len(objects) else "?b"
        for n in range(1, max_atoms):
            for body in itertools.combinations(atoms, n):
                try:
                    key = Rule(head, body).key()
                except ValueError:
                    continue
                if key in out or max(Counter(a.relation for a in (head, *body)).values()) > 3:
                    continue
                pairs = body_pairs(body)
                support = len(pairs & head_facts)
                if support:
                    domain = subjects if functional == "?a" else objects
                    pca = sum(1 for a, b in pairs if (a if functional == "?a" else b) in domain)
                    out[key] = (support, len(pairs), pca, functional)
    return out


def _random_graphs(seed: int, count: int) -> dict[str, list[tuple[int, int]]]:
    """``count`` small random graphs with disjoint relations and entities (so rules never mix them)."""
    rng = random.Random(seed)
    graph = {}
    for g in range(count):
        ents = [100 * (g + 1) + i for i in range(5)]
        for r in range(3):
            pairs = {(rng.choice(ents), rng.choice(ents)) for _ in range(rng.randint(3, 8))}
            graph[f"g{g}r{r}"] = sorted(pairs)  # self-loops allowed
    return graph


@pytest.fixture(scope="module")
def small_mined(spark):
    graph = {**graphs.SOCIAL, **_random_graphs(seed=11, count=8)}
    relation_ids = {r: i for i, r in enumerate(sorted(graph))}
    params = mining.MiningParams(
        max_atoms=3, min_head_coverage=0.0, min_std_confidence=0.0, min_pca_confidence=0.0, min_initial_support=1
    )
    result = mining.mine(_triples(spark, graph, relation_ids), {i: r for r, i in relation_ids.items()}, params)
    return graph, {c.key(): c for c in result.candidates}, result


def _metrics(rule: Rule) -> tuple:
    m = rule.metrics
    return (m["support"], m["body_size"], m["pca_body_size"], m["functional_variable"])


def test_hand_computed_metrics_with_object_functional_variable(small_mined):
    _, candidates, _ = small_mined
    rule = candidates[parse_rule("?a  knows  ?b   => ?a  likes  ?b").key()]
    # support {(1,2),(4,5)} = 2; body = 5 knows facts; PCA counts pairs whose ?b is an object of likes
    # ({2, 3, 5}): (1,2), (4,5), (7,5), (8,2) = 4 (with ?a it would be (1,2), (1,6), (4,5) = 3)
    assert _metrics(rule) == (2, 5, 4, "?b")
    assert rule.metrics["head_coverage"] == pytest.approx(2 / 3)
    assert rule.metrics["std_confidence"] == pytest.approx(2 / 5)
    assert rule.metrics["pca_confidence"] == pytest.approx(2 / 4)


def test_hand_computed_metrics_with_subject_functional_variable(small_mined):
    _, candidates, _ = small_mined
    rule = candidates[parse_rule("?a  livesIn  ?b   => ?a  bornIn  ?b").key()]
    # support {(1,10)} = 1; body 4; PCA: ?a among subjects of bornIn {1,2,3}: (1,10), (2,12) = 2
    # (with ?b among objects {10, 11} it would be 3)
    assert _metrics(rule) == (1, 4, 2, "?a")


def test_hand_computed_composition(small_mined):
    _, candidates, _ = small_mined
    rule = candidates[parse_rule("?a  parent  ?e  ?e  parent  ?b   => ?a  grandparent  ?b").key()]
    # body pairs (21,23), (21,24); support 1; grandparent objects {23, 29}: PCA body 1 (a perfect rule)
    assert _metrics(rule) == (1, 2, 1, "?b")
    assert rule.rule_type() == "composition"


def test_candidates_equal_an_independent_brute_force_miner(small_mined):
    graph, candidates, result = small_mined
    components = [graphs.SOCIAL] + [{r: p for r, p in graph.items() if r.startswith(f"g{g}r")} for g in range(8)]
    expected = {k: v for component in components for k, v in _brute_force(component).items()}
    got = {key: _metrics(rule) for key, rule in candidates.items()}
    assert got == expected
    assert result.counts["candidates"] == len(expected)


def test_four_atom_rules_equal_the_brute_force_miner(spark):
    graph = {"p": [(1, 2), (2, 3), (3, 1), (1, 4), (4, 4)], "q": [(2, 1), (3, 2), (1, 3), (4, 2)]}
    relation_ids = {"p": 0, "q": 1}
    params = mining.MiningParams(
        max_atoms=4, min_head_coverage=0.0, min_std_confidence=0.0, min_pca_confidence=0.0, min_initial_support=1
    )
    result = mining.mine(_triples(spark, graph, relation_ids), {0: "p", 1: "q"}, params)
    got = {c.key(): _metrics(c) for c in result.candidates}
    expected = _brute_force(graph, max_atoms=4)
    assert got == expected
    assert sum(1 for key in got if parse_rule(key).length == 4) > 50


def test_lengths_without_any_supported_rule_are_skipped(spark):
    # one symmetric pair: p(y, x) => p(x, y) holds; every two-atom body through a fresh variable only
    # reaches pairs (x, x), which are no facts, so no rule of 3 atoms has support
    params = mining.MiningParams(
        max_atoms=3, min_head_coverage=0.0, min_std_confidence=0.0, min_pca_confidence=0.0, min_initial_support=1
    )
    result = mining.mine(_triples(spark, {"p": [(1, 2), (2, 1)]}, {"p": 0}), {0: "p"}, params)
    assert (
        [c.key() for c in result.candidates]
        == [parse_rule("?b  p  ?a   => ?a  p  ?b").key()]
        == [r.key() for r in result.rules]
    )


def test_thresholds_and_initial_support_prune_candidates(spark):
    relation_ids = {r: i for i, r in enumerate(sorted(graphs.SOCIAL))}
    triples = _triples(spark, graphs.SOCIAL, relation_ids)
    names = {i: r for r, i in relation_ids.items()}
    strict = mining.mine(
        triples,
        names,
        mining.MiningParams(
            max_atoms=2, min_head_coverage=0.5, min_std_confidence=0.0, min_pca_confidence=0.0, min_initial_support=4
        ),
    )
    # only relations with >= 4 facts are heads (knows, livesIn, parent); max_atoms 2: one body atom
    assert {c.head.relation for c in strict.candidates} <= {"knows", "livesIn", "parent"}
    assert all(c.length == 2 and c.metrics["head_coverage"] >= 0.5 for c in strict.candidates)
    with pytest.raises(mining.MiningError, match="max_atoms"):
        mining.mine(triples, names, mining.MiningParams(max_atoms=5))
    with pytest.raises(mining.MiningError, match="min_head_coverage"):
        mining.MiningParams(min_head_coverage=1.5).validate()


def test_maximal_chain_bodies_ruled_out_by_their_lower_bound_are_not_sized(spark):
    # body x -A-> z -B-> y: 3 * 3 paths through z = 100, 1 * 1 through 102: 10 paths, at least
    # max_z = 9 distinct (x, y) pairs; body x -A-> z -C-> y: 3 * 1 through 100, 3 * 2 through 101: 9
    # paths, lower bound 6. Both rules have support 3: with min_std_confidence 0.5 a body may have at
    # most 3 / 0.5 = 6 pairs, so only A-C is kept (by the max, not the sum or the min; 6 <= 6 kept).
    a = [(0, x, 100) for x in (1, 2, 3)] + [(0, x, 101) for x in (4, 5, 6)] + [(0, 7, 102)]
    b = [(1, 100, y) for y in (11, 12, 13)] + [(1, 102, 14)]
    c = [(2, 100, 20), (2, 101, 21), (2, 101, 22)]
    edges = spark.createDataFrame(a + b + c, "rel int, s int, o int")
    degrees = plan.entity_relation_degrees(edges)
    shape = plan.Shape(((0, 2), (2, 1)))
    candidates = spark.createDataFrame(
        [(5, 0, 1, 3, 1), (5, 0, 2, 3, 1)], "r int, a0 int, a1 int, support long, functional_var int"
    )
    params = mining.MiningParams(
        max_atoms=3, min_head_coverage=0.01, min_std_confidence=0.5, min_pca_confidence=0.0, max_body_paths=9
    )
    assert mining.drops_by_lower_bound(shape, params)
    assertDataFrameEqual(mining.affordable_bodies(shape, candidates, degrees, params), [(0, 2)], checkRowOrder=False)
    # without the confidence threshold nothing is dropped: 10 + 9 = 19 paths exceed max_body_paths
    loose = mining.MiningParams(
        max_atoms=3, min_head_coverage=0.01, min_std_confidence=0.0, min_pca_confidence=0.0, max_body_paths=9
    )
    with pytest.raises(mining.MiningError, match=r"need 19 joined rows .*\(0, 1\): 10 paths, \(0, 2\): 9 paths"):
        mining.affordable_bodies(shape, candidates, degrees, loose)
    # a shorter rule's body size is needed to refine it: no drop below max_atoms
    assert not mining.drops_by_lower_bound(shape, mining.MiningParams(max_atoms=4, min_std_confidence=0.5))


# --- the real Family KG ----------------------------------------------------------------------------------


def test_family_reproduces_brink_table_1(family):
    _, summary, tsv = family
    assert summary.counts["rules"] == 145
    assert summary.counts["rules_by_type"] == {
        "symmetry": 0,
        "inversion": 6,
        "hierarchy": 0,
        "composition": 56,
        "other": 83,
    }
    rules = read_amie_tsv(tsv)
    assert len(rules) == 145
    husband = {r.key(): r for r in rules}[parse_rule("?b  wife_of  ?a   => ?a  husband_of  ?b").key()].metrics
    assert (husband["support"], husband["body_size"]) == (454, 711)  # husband_of has 717 facts
    assert husband["head_coverage"] == pytest.approx(454 / 717)


def test_family_rules_equal_the_regression_fixture(family):
    _, _, tsv = family
    mined = {r.key(): r.metrics for r in read_amie_tsv(tsv)}
    fixture = {r.key(): r.metrics for r in read_amie_tsv(FIXTURES / "rules" / "brink-family.tsv")}
    assert mined == fixture


def test_probe_family_rules_equal_the_regression_fixture(spark, config, probe_datasets, work_dir):
    """PROBE's family KG (train + valid + test, 28,356 facts) mined with BRINK's thresholds equals the
    fixture written by ``make rule-fixtures`` (273 rules); the other PROBE fixtures (umls, kinship,
    wn18rr, and max_atoms 4) take minutes each and are checked by re-running that target."""
    from kgbrink.jobs import mine

    tsv = work_dir / "probe-family-rules.tsv"
    options = mine.MineOptions(
        dataset=probe_datasets["family"],
        splits=["train", "valid", "test"],
        rules=str(work_dir / "probe-family-rules"),
        tsv=str(tsv),
    )
    mine.run(JobContext(spark, config), options)
    mined = {r.key(): r.metrics for r in read_amie_tsv(tsv)}
    fixture = {r.key(): r.metrics for r in read_amie_tsv(FIXTURES / "rules" / "probe-family.tsv")}
    assert len(fixture) == 273
    assert mined == fixture


def test_rules_table_and_amie_tsv_round_trip_through_the_jobs(spark, config, family, work_dir):
    from kgbrink.core.delta import read_table, table_path
    from kgbrink.jobs import mine

    dataset, _, _ = family
    exported = work_dir / "exported.tsv"
    mine.export_rules(JobContext(spark, config), mine.ExportRulesOptions(dataset=dataset, tsv=str(exported)))
    imported = table_path(dataset, "rules_imported")
    mine.import_rules(
        JobContext(spark, config), mine.ImportRulesOptions(dataset=dataset, tsv=str(exported), rules=imported)
    )
    original = read_table(spark, table_path(dataset, "rules"))
    assert original.count() == 145
    assertDataFrameEqual(read_table(spark, imported), original)
    row = original.filter(F.col("rule_type") == "inversion").orderBy("id").first()
    assert row["head_relation"] in {"husband_of", "wife_of", "father_of", "son_of"}
    assert len(row["id"]) == 16 and row["length"] == 2


def test_import_rules_rejects_relations_the_dataset_lacks(spark, config, family, work_dir):
    from kgbrink.core.tracking import JobFailed
    from kgbrink.jobs import mine

    dataset, _, _ = family
    bad = work_dir / "unknown.tsv"
    bad.write_text(
        "Rule\tHead Coverage\tStd Confidence\tPCA Confidence\tPositive Examples\tBody size\tPCA Body size\tFunctional variable\n"
        "?a  cousin_of  ?b   => ?a  husband_of  ?b\t0.5\t0.5\t0.5\t1\t2\t2\t?a\n"
    )
    with pytest.raises(JobFailed, match="cousin_of"):
        mine.import_rules(
            JobContext(spark, config),
            mine.ImportRulesOptions(dataset=dataset, tsv=str(bad), rules=str(work_dir / "never")),
        )


def test_bucketed_supports_equal_one_pass(spark, family_kg, work_dir):
    _, relation_ids, triples = family_kg
    params = mining.MiningParams(
        max_atoms=3, min_head_coverage=0.1, min_std_confidence=0.3, min_pca_confidence=0.4, rows_per_batch=100_000
    )
    result = mining.mine(triples, {i: r for r, i in relation_ids.items()}, params, str(work_dir / "mine-buckets"))
    buckets = list((work_dir / "mine-buckets").glob("shape-*/bucket=*"))
    assert len(buckets) >= 8  # the 4 chain shapes were cut into at least 2 buckets each
    fixture = {r.key(): r.metrics for r in read_amie_tsv(FIXTURES / "rules" / "brink-family.tsv")}
    assert {
        r.key(): (r.metrics["support"], r.metrics["body_size"], r.metrics["pca_body_size"]) for r in result.rules
    } == {k: (m["support"], m["body_size"], m["pca_body_size"]) for k, m in fixture.items()}


def test_three_atom_body_supports_in_buckets_and_start_groups_equal_naive_joins(spark, family_kg, work_dir):
    """max_atoms 4 with head coverage 0.1 on Family: a prefix's support counted over one start group or
    one bucket of the facts is partial and must not be thresholded (it was until 2026-11-22). Oracle:
    the chain x-z-w-y as plain joins, distinct head pairs per relation assignment."""
    triples = family_kg[2]
    params = mining.MiningParams(
        max_atoms=4, min_head_coverage=0.1, min_std_confidence=0.0, min_pca_confidence=0.0, rows_per_batch=20_000
    )
    edges = plan.kg_edges(triples).cache()
    facts = {r["rel"]: r["facts"] for r in plan.relation_profile(edges).collect()}
    heads = sorted(facts)
    thresholds = spark.createDataFrame(
        [(r, supports.min_support_count(facts[r], params)) for r in heads], "r int, min_count long"
    )
    inputs, _ = supports.support_inputs(edges, plan.entity_relation_degrees(edges), thresholds, heads, params)
    chain = next(s for s in plan.body_shapes(4) if s.atoms == ((0, 2), (2, 3), (3, 1)))
    one_pass = supports.shape_supports(chain, inputs, heads)
    bucketed = supports.batched_shape_supports(chain, inputs, heads, str(work_dir / "mine-buckets-4"))
    assert len(list((work_dir / "mine-buckets-4").glob("shape-*/bucket=*"))) >= 2

    def atom(slot, s, o):
        return edges.select(F.col("rel").alias(slot), F.col("s").alias(s), F.col("o").alias(o))

    naive = (
        atom("r", "x", "y")
        .join(atom("a0", "x", "z"), "x")
        .join(atom("a1", "z", "w"), "z")
        .join(atom("a2", "w", "y"), ["w", "y"])
        .filter(
            ~((F.col("r") == F.col("a0")) & (F.col("a0") == F.col("a1")) & (F.col("a1") == F.col("a2")))
        )  # recursivity limit 3
        .select("r", "a0", "a1", "a2", "x", "y")
        .distinct()
        .groupBy("r", "a0", "a1", "a2")
        .agg(F.count(F.lit(1)).alias("support"))
        .join(thresholds, "r")
        .filter(F.col("support") >= F.col("min_count"))
        .drop("min_count")
    )
    expected = naive.collect()
    assert len(expected) > 100
    assertDataFrameEqual(one_pass, expected)
    assertDataFrameEqual(bucketed, expected)


# --- groundings ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def family_kg(spark, family):
    from kgbrink.core.delta import read_table, table_path
    from kgbrink.rules.table import read_rules

    dataset, _, _ = family
    rules = read_rules(spark, table_path(dataset, "rules"))
    relation_ids = {r["key"]: r["id"] for r in read_table(spark, table_path(dataset, "relations")).collect()}
    triples = read_table(spark, table_path(dataset, "triples")).select("h", "r", "t").cache()
    return rules, relation_ids, triples


def test_all_groundings_match_support_and_lie_in_the_kg(family_kg):
    rules, relation_ids, triples = family_kg
    chosen = (
        [r for r in rules if r.rule_type() == "inversion"][:2]
        + [r for r in rules if r.rule_type() == "composition"][:2]
        + [r for r in rules if r.rule_type() == "other"][:2]
    )
    found = grounding.groundings(chosen, triples, relation_ids).cache()
    per_rule = {
        r["rule_id"]: r
        for r in found.groupBy("rule_id")
        .agg(F.countDistinct("head").alias("heads"), F.count(F.lit(1)).alias("n"))
        .collect()
    }
    for rule in chosen:
        row = per_rule[rule.rule_id()]
        assert row["heads"] == rule.metrics["support"]  # distinct head triples = support
        if rule.length == 2:
            assert row["n"] == rule.metrics["support"]
    # every head and body triple is a KG triple, and bindings agree with the triples
    used = (
        found.select(F.explode(F.concat(F.array("head"), F.col("body"))).alias("x"))
        .select("x.h", "x.r", "x.t")
        .distinct()
    )
    assert used.join(triples, ["h", "r", "t"], "left_anti").count() == 0
    sample = found.filter(F.size("body") == 2).first()
    assert sample["head"]["h"] == sample["bindings"]["?a"] and sample["head"]["t"] == sample["bindings"]["?b"]


def test_grounding_samples_are_the_smallest_hashes_and_partition_independent(spark, family_kg):
    rules, relation_ids, triples = family_kg
    chosen = [r for r in rules if r.rule_type() == "composition"][:3] + [
        r for r in rules if r.rule_type() == "inversion"
    ][:1]
    everything = grounding.groundings(chosen, triples, relation_ids, seed=5)
    smallest = (
        everything.withColumn(
            "k", F.row_number().over(Window.partitionBy("rule_id").orderBy("sample_hash", "head", "body"))
        )
        .filter("k <= 30")
        .drop("k")
    )
    one = grounding.groundings(chosen, triples.repartition(1), relation_ids, per_rule=30, seed=5)
    assertDataFrameEqual(one, smallest)
    with session_setting(spark, "spark.sql.shuffle.partitions", "7"):
        many = grounding.groundings(chosen, triples.repartition(5, "t"), relation_ids, per_rule=30, seed=5)
        assertDataFrameEqual(many, one)
    assert {r["count"] for r in one.groupBy("rule_id").count().collect()} == {30}
    other_seed = grounding.groundings(chosen, triples, relation_ids, per_rule=30, seed=6)
    assert other_seed.join(one, ["rule_id", "head", "body"], "left_anti").count() > 0


def test_grounding_excludes_heads_among_their_own_body_and_unknown_relations(spark):
    # p(1,1) is a self-loop: in ?a p ?e  ?e q ?b => ?a p ?b the grounding a = e = b = 1 has its head p(1,1)
    # among its body triples; a = 4, e = 5, b = 6 is a proper grounding
    graph = {"p": [(1, 1), (4, 5), (4, 6)], "q": [(1, 1), (5, 6)]}
    relation_ids = {"p": 0, "q": 1}
    rule = parse_rule("?a  p  ?e  ?e  q  ?b   => ?a  p  ?b")
    found = grounding.groundings([rule], _triples(spark, graph, relation_ids), relation_ids).collect()
    assert [(r["bindings"]["?a"], r["bindings"]["?e"], r["bindings"]["?b"]) for r in found] == [(4, 5, 6)]
    with pytest.raises(grounding.GroundingError, match="not in the dataset: r"):
        grounding.groundings(
            [parse_rule("?a  r  ?b   => ?a  p  ?b")], _triples(spark, graph, relation_ids), relation_ids
        )
    with pytest.raises(grounding.GroundingError, match="per_rule"):
        grounding.groundings([rule], _triples(spark, graph, relation_ids), relation_ids, per_rule=0)
