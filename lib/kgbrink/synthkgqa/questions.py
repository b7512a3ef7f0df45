"""Question records with ground-truth answer subgraphs (paper 002, spec 2.0, 2.B, 2.C) as DataFrames.

Input: JSON Lines, one question per line::

    {"id": "q1", "split": "test", "question": "...", "seeds": ["Q90", "Q142"], "answer": "Q7",
     "answer_subgraph": [["Q90", "P17", "Q142"], ["Q7", "P19", "Q90"]]}

(``split`` and ``question``, the question's text, optional; entity and relation KEYS of the dataset's dictionaries. GTSQA's ``graph_isomorphism``
and ``n_hops``, when given, are kept as ``given_type`` and ``given_hops`` to be compared with the
classification; other fields are ignored.)
Every non-blank line ends in exactly one place: the ``gt_questions`` table (:data:`QUESTION_COLUMNS`, ids,
with the classification of :mod:`kgbrink.synthkgqa.answer_types`) or the quarantine
(:data:`QUARANTINE_COLUMNS`) with its file, line number and the first reason that applies, in this order:

``malformed_json`` (not a JSON object, or a key repeated in it), ``missing_field`` (id, seeds, answer or
answer_subgraph absent or null; detail names them), ``bad_field_type`` (a field of another JSON type: id a
string or an integer, keys strings, n_hops an integer; detail names the field), ``bad_triple`` (an
answer_subgraph element that is not three keys), ``too_many_keys`` (more seeds and triples than
``gt_questions.max_keys_per_question``), ``duplicate_id`` (every line of an id after its first), ``unknown_entity``,
``unknown_relation`` (keys not in the dictionaries; detail lists them), ``triple_not_in_kg`` (a triple of
the subgraph is not in the KG, i.e. the chosen splits; detail lists them), then the answer-subgraph
reasons of :data:`kgbrink.synthkgqa.answer_types.REASONS`.

Seeds and subgraph triples are sets: repeats are dropped (first occurrence order kept).

:func:`answer_sets` evaluates each question's tree query on the KG (spec 2.C): seeds are constants, the
answer and intermediate nodes variables, each triple an atom with its direction. Bindings are propagated
from the leaves to the root with one join per tree level and direction (a semi-join reduction, exact for
tree queries), so no question's bindings are enumerated beyond one node at a time.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from kgbrink.core import json_lines
from kgbrink.core.frames import checkpoint, spread_join
from kgbrink.core.quarantine import MAX_QUARANTINED_LINE_CHARS, mark_repeats, with_line_numbers
from kgbrink.synthkgqa import answer_types

TRIPLE_TYPE = "array<struct<h: int, r: int, t: int>>"
QUESTION_COLUMNS = [
    "id",
    "split",
    "question",
    "seeds",
    "answer",
    "answer_subgraph",
    "graph_isomorphism",
    "dutt_label",
    "n_hops",
    "n_edges",
    "n_seeds",
    "n_intermediate",
    "all_answers",
    "n_answers",
    "answer_in_set",
    "full_answer_subgraph",
]
QUARANTINE_COLUMNS = ["source_file", "line_number", "id", "line", "reason", "detail"]
PARSE_REASONS = ("malformed_json", "missing_field", "bad_field_type", "bad_triple", "too_many_keys")
RECORD_REASONS = (
    *PARSE_REASONS,
    "duplicate_id",
    "unknown_entity",
    "unknown_relation",
    "triple_not_in_kg",
)
REASONS = RECORD_REASONS + answer_types.REASONS
_FIELDS = ("id", "seeds", "answer", "answer_subgraph")
_VERDICT = T.StructType(
    [
        T.StructField("reason", T.StringType()),
        T.StructField("detail", T.StringType()),
        T.StructField("graph_isomorphism", T.StringType()),
        T.StructField("dutt_label", T.StringType()),
        T.StructField("n_hops", T.IntegerType()),
        T.StructField("n_edges", T.IntegerType()),
        T.StructField("n_seeds", T.IntegerType()),
        T.StructField("n_intermediate", T.IntegerType()),
    ]
)


# --- parsing ------------------------------------------------------------------------------------------


def _first(*checks: tuple[Column, Column]) -> Column:
    """The detail of the first check whose condition holds (NULL: none)."""
    return F.coalesce(*[F.when(condition, detail) for condition, detail in checks])


def parse_lines(lines: DataFrame, max_keys: int) -> DataFrame:
    """``source_file, line_number, line, id, split, seeds, answer, triples, given_type, given_hops, reason,
    detail`` per non-blank line of :func:`kgbrink.core.files.read_lines` output (keys as strings; ``reason``
    null for a good record, else the first of :data:`PARSE_REASONS` that applies)."""
    lines = lines.where(F.trim(F.regexp_replace("line", "\r$", "")) != "")
    rec = json_lines.record(F.col("line"))
    optional = ("split", "question", "graph_isomorphism", "n_hops")
    value = {name: json_lines.field(rec, name) for name in (*_FIELDS, *optional)}
    fields = lines.select(
        "split",
        "source_file",
        "block_start",
        "row_id",
        "line",
        json_lines.kind(rec).alias("_record"),
        *[value[name].alias(f"_{name}") for name in value],
    )
    v = {name: F.col(f"_{name}") for name in value}
    kinds = {name: json_lines.kind(column) for name, column in v.items()}
    seeds, triples = json_lines.elements(v["seeds"]), json_lines.elements(v["answer_subgraph"])
    missing = F.filter(
        F.array(*[F.when(~json_lines.present(v[f]), F.lit(f)) for f in _FIELDS]), lambda x: x.isNotNull()
    )
    bad_seed = json_lines.first_not(seeds, ("string",))

    def wrong(name: str, allowed: tuple[str, ...], what: str) -> tuple[Column, Column]:
        given = json_lines.present(v[name]) & ~kinds[name].isin(*allowed)
        return given, F.concat(F.lit(f"{name} is "), kinds[name], F.lit(f"; it must be {what}"))

    bad_type = _first(
        wrong("id", ("string", "integer"), "a string or an integer"),
        wrong("seeds", ("array",), "a list of entity keys"),
        (
            bad_seed.isNotNull(),
            F.format_string(
                "seed %d of %d is %s; keys are strings", bad_seed["position"], F.size(seeds), bad_seed["kind"]
            ),
        ),
        wrong("answer", ("string",), "an entity key"),
        wrong("answer_subgraph", ("array",), "a list of [head, relation, tail] keys"),
        wrong("split", ("string",), "a split name"),
        wrong("question", ("string",), "the question's text"),
        wrong("graph_isomorphism", ("string",), "a type identifier"),
        wrong("n_hops", ("integer", "string"), "an integer"),
    )
    bad_triples = F.filter(
        triples,
        lambda x: ~F.coalesce(
            (json_lines.kind(x) == "array")
            & (F.size(json_lines.elements(x)) == 3)
            & ~F.exists(json_lines.elements(x), lambda k: json_lines.kind(k) != "string"),
            F.lit(False),
        ),
    )
    n_keys = F.size(seeds) + F.size(triples)
    malformed = F.col("_record").isNull() | (F.col("_record") != "object")
    reason = (
        F.when(malformed, "malformed_json")
        .when(F.size(missing) > 0, "missing_field")
        .when(bad_type.isNotNull(), "bad_field_type")
        .when(F.size(bad_triples) > 0, "bad_triple")
        .when(n_keys > max_keys, "too_many_keys")
    )
    detail = (
        F.when(malformed, "not a JSON object with unique keys")
        .when(F.size(missing) > 0, F.concat(F.lit("missing or null: "), F.array_join(missing, ", ")))
        .when(bad_type.isNotNull(), bad_type)
        .when(
            F.size(bad_triples) > 0,
            F.concat(
                F.lit("answer_subgraph elements must be [head, relation, tail] keys, got "),
                F.to_json(F.element_at(bad_triples, 1)),
            ),
        )
        .when(
            n_keys > max_keys,
            F.format_string("%d seeds and triples > gt_questions.max_keys_per_question = %d", n_keys, F.lit(max_keys)),
        )
    )

    def text(x: Column) -> Column:
        return F.try_variant_get(x, "$", "string")

    parsed = fields.select(
        "split",
        "source_file",
        "block_start",
        "row_id",
        F.make_valid_utf8(F.substring(F.regexp_replace("line", "\r$", ""), 1, MAX_QUARANTINED_LINE_CHARS)).alias(
            "line"
        ),
        json_lines.as_string(v["id"]).alias("id"),
        text(v["split"]).alias("question_split"),
        text(v["question"]).alias("question"),
        F.transform(seeds, text).alias("seeds"),
        text(v["answer"]).alias("answer"),
        F.transform(triples, lambda x: F.transform(json_lines.elements(x), text)).alias("triples"),
        text(v["graph_isomorphism"]).alias("given_type"),
        json_lines.as_string(v["n_hops"]).alias("given_hops"),
        reason.alias("reason"),
        detail.alias("detail"),
    )
    numbered = with_line_numbers(parsed).select(
        "source_file",
        "line_number",
        "line",
        "id",
        F.col("question_split").alias("split"),
        "question",
        "seeds",
        "answer",
        "triples",
        "given_type",
        "given_hops",
        "reason",
        "detail",
    )
    return mark_repeats(numbered, "id", "duplicate_id")


# --- keys to ids ---------------------------------------------------------------------------------------


def _quarantine(frame: DataFrame) -> DataFrame:
    types = ("string", "bigint", "string", "string", "string", "string")
    return frame.select(*[F.col(c).cast(t) for c, t in zip(QUARANTINE_COLUMNS, types, strict=True)])


def _lookup(keys: DataFrame, dictionary: DataFrame, broadcast: bool) -> DataFrame:
    """Per question: ``map`` key -> id of its keys found in ``dictionary(id, key)`` and the sorted
    ``unknown`` keys."""
    table = dictionary.select("key", F.col("id").alias("value"))
    found = keys.join(F.broadcast(table) if broadcast else table, "key", "left")
    return found.groupBy("id").agg(
        F.map_from_entries(F.collect_list(F.when(F.col("value").isNotNull(), F.struct("key", "value")))).alias("map"),
        F.array_sort(F.collect_set(F.when(F.col("value").isNull(), F.col("key")))).alias("unknown"),
    )


def resolve_keys(records: DataFrame, entities: DataFrame, relations: DataFrame) -> tuple[DataFrame, DataFrame]:
    """``(questions, quarantine)``: good records with their keys looked up in ``entities(id, key)`` and
    ``relations(id, key)``: ``source_file, line_number, line, id, split, seeds array<int>, answer int,
    answer_subgraph array<struct<h, r, t>>`` (repeats dropped), and the bad records with their reasons."""
    bad = _quarantine(records.where(F.col("reason").isNotNull()))
    good = records.where(F.col("reason").isNull()).drop("reason", "detail")
    ends = F.flatten(F.transform("triples", lambda x: F.array(x[0], x[2])))
    entity_keys = good.select(
        "id", F.explode(F.array_distinct(F.concat("seeds", F.array("answer"), ends))).alias("key")
    )
    relation_keys = good.select("id", F.explode(F.array_distinct(F.transform("triples", lambda x: x[1]))).alias("key"))
    ent = _lookup(entity_keys, entities, broadcast=False).select(
        "id", F.col("map").alias("emap"), F.col("unknown").alias("unknown_entities")
    )
    rel = _lookup(relation_keys, relations, broadcast=True).select(
        "id", F.col("map").alias("rmap"), F.col("unknown").alias("unknown_relations")
    )
    joined = good.join(ent, "id").join(rel, "id", "left")
    reason = F.when(F.size("unknown_entities") > 0, "unknown_entity").when(
        F.coalesce(F.size("unknown_relations"), F.lit(0)) > 0, "unknown_relation"
    )
    detail = F.when(F.size("unknown_entities") > 0, F.array_join("unknown_entities", ", ")).when(
        F.coalesce(F.size("unknown_relations"), F.lit(0)) > 0, F.array_join("unknown_relations", ", ")
    )
    checked = joined.withColumn("reason", reason).withColumn("detail", detail).transform(checkpoint)
    bad = bad.unionByName(_quarantine(checked.where(F.col("reason").isNotNull())))

    def entity(key: Column) -> Column:
        return F.element_at(F.col("emap"), key)

    subgraph = F.array_distinct(
        F.transform(
            "triples",
            lambda x: F.struct(
                entity(x[0]).alias("h"), F.element_at(F.col("rmap"), x[1]).alias("r"), entity(x[2]).alias("t")
            ),
        )
    )
    questions = checked.where(F.col("reason").isNull()).select(
        "source_file",
        "line_number",
        "line",
        "id",
        "split",
        "question",
        F.array_distinct(F.transform("seeds", entity)).alias("seeds"),
        entity(F.col("answer")).alias("answer"),
        F.coalesce(subgraph, F.array()).cast(TRIPLE_TYPE).alias("answer_subgraph"),
        "given_type",
        "given_hops",
    )
    return questions, bad


def check_in_kg(questions: DataFrame, kg: DataFrame) -> tuple[DataFrame, DataFrame]:
    """``(questions, quarantine)``: questions whose every subgraph triple is a triple of ``kg(h, r, t)``,
    and the others as ``triple_not_in_kg`` with the missing triples (ids) in the detail. The KG is scanned
    once against the (broadcast) subgraph triples."""
    wanted = questions.select("id", F.explode("answer_subgraph").alias("x")).select("id", "x.h", "x.r", "x.t")
    present = kg.select("h", "r", "t").join(
        F.broadcast(wanted.select("h", "r", "t").distinct()), ["h", "r", "t"], "left_semi"
    )
    missing = (
        wanted.join(present.distinct(), ["h", "r", "t"], "left_anti")
        .groupBy("id")
        .agg(F.array_sort(F.collect_set(F.struct("h", "r", "t"))).alias("missing"))
        .select(
            "id",
            F.lit("triple_not_in_kg").alias("reason"),
            F.concat(
                F.lit("(h, r, t) ids not in the KG: "),
                F.array_join(
                    F.transform(
                        "missing",
                        lambda x: F.concat_ws(" ", x["h"].cast("string"), x["r"].cast("string"), x["t"].cast("string")),
                    ),
                    "; ",
                ),
            ).alias("detail"),
        )
    )
    bad = _quarantine(questions.join(missing, "id"))
    return questions.join(missing.select("id"), "id", "left_anti"), bad


# --- classification ------------------------------------------------------------------------------------


def verdict_udf(max_edges: int):
    """A UDF ``(seeds, answer, answer_subgraph) -> struct`` of :data:`_VERDICT` (answer_types.classify)."""

    def run(seeds, answer, triples):
        verdict = answer_types.classify(seeds or [], answer, [(x[0], x[1], x[2]) for x in triples or []], max_edges)
        t = verdict.type
        if t is None:
            return (verdict.reason, verdict.detail, None, None, None, None, None, None)
        return (None, None, t.graph_isomorphism, t.dutt_label, t.n_hops, t.n_edges, t.n_seeds, t.n_intermediate)

    return F.udf(run, _VERDICT)


def classify(questions: DataFrame, max_edges: int) -> tuple[DataFrame, DataFrame]:
    """``(valid, quarantine)``: questions (ids) with the classification columns of spec 2.B added, and the
    invalid ones with their reason. Keeps every other column of ``questions``."""
    v = verdict_udf(max_edges)("seeds", "answer", "answer_subgraph")
    judged = questions.withColumn("_v", v).transform(checkpoint)
    bad = _quarantine(
        judged.where(F.col("_v.reason").isNotNull()).withColumns({"reason": "_v.reason", "detail": "_v.detail"})
    )
    valid = judged.where(F.col("_v.reason").isNull()).select(
        *questions.columns, *[F.col(f"_v.{f.name}").alias(f.name) for f in _VERDICT.fields[2:]]
    )
    return valid, bad


def ingest(records: DataFrame, entities: DataFrame, relations: DataFrame, kg: DataFrame, max_edges: int):
    """``(questions, quarantine)`` from parsed records (:func:`parse_lines`): keys resolved, triples checked
    against ``kg``, subgraphs classified. ``questions`` has ``source_file, line_number, line`` and the
    columns of :data:`QUESTION_COLUMNS` up to ``n_intermediate``."""
    resolved, bad_keys = resolve_keys(records, entities, relations)
    in_kg, bad_kg = check_in_kg(resolved, kg)
    valid, bad_type = classify(in_kg, max_edges)
    return valid, bad_keys.unionByName(bad_kg).unionByName(bad_type)


def as_table(questions: DataFrame, answers: DataFrame | None = None) -> DataFrame:
    """The ``synthkgqa.gt_questions`` columns: answer-set columns from ``answers(id, all_answers,
    n_answers, answer_in_set, full_answer_subgraph)`` (null when not given); ``question`` null when the
    questions have none (planted)."""
    if answers is None:
        frame = questions.withColumns(
            {
                "all_answers": F.lit(None).cast("array<int>"),
                "n_answers": F.lit(None).cast("int"),
                "answer_in_set": F.lit(None).cast("boolean"),
                "full_answer_subgraph": F.lit(None).cast(TRIPLE_TYPE),
            }
        )
    else:
        frame = questions.join(answers, "id", "left")
    if "question" not in frame.columns:
        frame = frame.withColumn("question", F.lit(None).cast("string"))
    return frame.select(
        F.col("id").cast("string"),
        F.col("split").cast("string"),
        F.col("question").cast("string"),
        F.col("seeds").cast("array<int>"),
        F.col("answer").cast("int"),
        F.col("answer_subgraph").cast(TRIPLE_TYPE),
        *[F.col(c) for c in ("graph_isomorphism", "dutt_label")],
        *[F.col(c).cast("int") for c in ("n_hops", "n_edges", "n_seeds", "n_intermediate")],
        F.col("all_answers").cast("array<int>"),
        F.col("n_answers").cast("int"),
        F.col("answer_in_set").cast("boolean"),
        F.col("full_answer_subgraph").cast(TRIPLE_TYPE),
    )


def type_counts(questions: DataFrame) -> DataFrame:
    """``synthkgqa.answer_types``: questions per (split, type) with the type's Dutt label, hops, edges,
    seeds."""
    return questions.groupBy("split", "graph_isomorphism", "dutt_label", "n_hops", "n_edges", "n_seeds").agg(
        F.count("*").alias("questions")
    )


# --- answer sets (spec 2.C) ----------------------------------------------------------------------------

_TREE = "array<struct<child: int, parent: int, r: int, child_is_head: boolean, depth: int>>"
# Bindings of one tree level joined to the KG as a broadcast table when there are at most this many.
BROADCAST_BINDINGS = 1_000_000
SPREAD_ROWS = 2_000_000  # a level's KG matches per task, at most, past the broadcast (frames.spread_join)
# A question with more bindings at one tree level is not evaluated (null answer columns).
MAX_BINDINGS = 1_000_000


def _tree_udf():
    return F.udf(
        lambda answer, triples: answer_types.rooted_triples(answer, [(x[0], x[1], x[2]) for x in triples]),
        _TREE,
    )


def answer_sets(
    questions: DataFrame,
    kg: DataFrame,
    max_answers: int,
    max_bindings: int | None = MAX_BINDINGS,
    broadcast_bindings: int = BROADCAST_BINDINGS,
    spread_rows: int = SPREAD_ROWS,
) -> DataFrame:
    """``id, all_answers, n_answers, answer_in_set, full_answer_subgraph`` of valid questions ``(id, seeds,
    answer, answer_subgraph, n_hops)``: the answers of each tree query on ``kg(h, r, t)`` (spec 2.C).
    ``n_answers`` and ``answer_in_set`` are exact; ``all_answers`` is the sorted set, null when there are
    more than ``max_answers`` answers (the questions the reference code discards with --max-num-answers);
    ``full_answer_subgraph`` is the union of the triples of every binding of the query (App. A.4's
    CONSTRUCT), sorted, null when ``all_answers`` is.

    Bottom-up semi-join evaluation: the bindings of a node are the entities joined by the atom's relation
    (in the atom's direction) to a binding of every child; seeds bind to themselves. One pass per tree
    level, two KG joins each (child as head, child as tail). A question whose bindings at one level exceed
    ``max_bindings`` (a hub's instances) is not evaluated further: its columns are null. Past
    ``broadcast_bindings`` bindings at a level, the KG join is spread (:func:`kgbrink.core.frames.spread_join`,
    ``spread_rows`` matches a task): a hub's (entity, relation) matches are not one task's. The full answer
    subgraph is the top-down pass of the same join tree (Yannakakis' full reducer, exact for trees): from
    the root's bindings down, an atom's KG triple is kept when its parent's binding is kept, and its child's
    binding then is."""
    kg = kg.select("h", "r", "t")
    tree = questions.select("id", F.explode(_tree_udf()("answer", "answer_subgraph")).alias("e")).select("id", "e.*")
    tree = tree.transform(checkpoint)
    children = tree.groupBy("id", F.col("parent").alias("node")).agg(F.count("*").alias("n_children"))
    seeds = questions.select("id", F.explode("seeds").alias("node")).withColumn("x", F.col("node"))
    depth = questions.agg(F.max("n_hops")).first()[0] or 0
    computed, capped, pairs = None, [], {}
    for d in range(depth, 0, -1):
        bound = seeds if computed is None else seeds.unionByName(computed)
        if capped:
            bound = bound.where(~F.col("id").isin(capped))
        step = tree.where(F.col("depth") == d).join(
            bound, (tree["id"] == bound["id"]) & (F.col("child") == F.col("node"))
        )
        step = step.select(tree["id"].alias("id"), "child", "parent", "r", "child_is_head", "x").transform(checkpoint)
        if step.count() <= broadcast_bindings:  # the usual case: the KG is scanned, not shuffled

            def join(bound, edges):
                return F.broadcast(bound).join(edges, ["x", "r"])
        else:  # a hub's (entity, relation) matches spread over tasks, not one

            def join(bound, edges):
                return spread_join(bound, edges, ["x", "r"], spread_rows)

        as_head = join(step.where(F.col("child_is_head")), kg.select(F.col("h").alias("x"), "r", F.col("t").alias("y")))
        as_tail = join(
            step.where(~F.col("child_is_head")), kg.select(F.col("t").alias("x"), "r", F.col("h").alias("y"))
        )
        # each atom's realisations: the child's binding x, the parent's y, the KG triple
        pairs[d] = (
            as_head.select("id", "parent", "child", "x", "y", F.col("x").alias("h"), "r", F.col("y").alias("t"))
            .unionByName(
                as_tail.select("id", "parent", "child", "x", "y", F.col("y").alias("h"), "r", F.col("x").alias("t"))
            )
            .distinct()
            .transform(checkpoint)
        )
        reached = pairs[d].select("id", "parent", "child", "y").distinct()
        computed = (
            reached.groupBy("id", F.col("parent").alias("node"), F.col("y").alias("x"))
            .agg(F.count("*").alias("n"))
            .join(children, ["id", "node"])
            .where(F.col("n") == F.col("n_children"))
            .select("id", "node", "x")
            .transform(checkpoint)
        )
        if max_bindings is not None:
            over = computed.groupBy("id").count().where(F.col("count") > max_bindings).select("id").collect()
            if over:
                capped += [r["id"] for r in over]
                computed = computed.where(~F.col("id").isin(capped)).transform(checkpoint)
    out = questions.select("id", "answer")
    if computed is None:  # no question with an edge
        return out.select(
            "id",
            F.array().cast("array<int>").alias("all_answers"),
            F.lit(0).alias("n_answers"),
            F.lit(False).alias("answer_in_set"),
            F.array().cast(TRIPLE_TYPE).alias("full_answer_subgraph"),
        )
    at_root = computed.join(questions.select("id", F.col("answer").alias("node")), ["id", "node"])
    counts = at_root.groupBy("id").agg(
        F.count("*").cast("int").alias("n_answers"),
        F.max(F.col("x") == F.col("node")).alias("answer_in_set"),
    )
    listed = (
        at_root.join(counts.where(F.col("n_answers") <= max_answers).select("id"), "id", "left_semi")
        .groupBy("id")
        .agg(F.array_sort(F.collect_list("x")).alias("all_answers"))
    )
    full = _full_subgraphs(at_root.join(listed.select("id"), "id", "left_semi"), pairs)
    n = F.coalesce(F.col("n_answers"), F.lit(0))
    evaluated = ~F.col("id").isin(capped) if capped else F.lit(True)
    listed_here = evaluated & (n <= max_answers)
    return (
        out.join(counts, "id", "left")
        .join(listed, "id", "left")
        .join(full, "id", "left")
        .select(
            "id",
            F.when(listed_here, F.coalesce("all_answers", F.array().cast("array<int>"))).alias("all_answers"),
            F.when(evaluated, n).alias("n_answers"),
            F.when(evaluated, F.coalesce("answer_in_set", F.lit(False))).alias("answer_in_set"),
            F.when(listed_here, F.coalesce("full_answer_subgraph", F.array().cast(TRIPLE_TYPE))).alias(
                "full_answer_subgraph"
            ),
        )
    )


def _full_subgraphs(roots: DataFrame, pairs: dict[int, DataFrame]) -> DataFrame:
    """``id, full_answer_subgraph``: from the root bindings ``(id, node, x)`` down the levels of ``pairs``
    (per depth the atoms' realisations ``id, parent, child, x, y, h, r, t`` of bottom-up valid bindings),
    the KG triples whose parent binding is kept; their child bindings are kept for the next level."""
    kept = roots.select("id", "node", "x")
    triples = None
    for d in sorted(pairs):
        parents = kept.select("id", F.col("node").alias("parent"), F.col("x").alias("y"))
        level = pairs[d].join(parents, ["id", "parent", "y"], "left_semi").transform(checkpoint)
        found = level.select("id", "h", "r", "t")
        triples = found if triples is None else triples.unionByName(found)
        kept = level.select("id", F.col("child").alias("node"), "x").distinct()
    if triples is None:
        return roots.sparkSession.createDataFrame([], f"id string, full_answer_subgraph {TRIPLE_TYPE}")
    return triples.groupBy("id").agg(
        F.array_sort(F.collect_set(F.struct("h", "r", "t"))).cast(TRIPLE_TYPE).alias("full_answer_subgraph")
    )


def given_mismatches(questions: DataFrame) -> dict | None:
    """``given_types, given_type_mismatch, given_hops, given_hops_mismatch``: how many records carry their
    own ``graph_isomorphism`` / ``n_hops`` (GTSQA's, as ``given_type`` / ``given_hops``) and how many of
    those differ from the classification (spec 2.G; must be 0). None when no record carries either."""
    if "given_type" not in questions.columns:
        return None
    given = questions.agg(
        F.count("given_type").alias("types"),
        F.sum(F.when(F.col("given_type") != F.col("graph_isomorphism"), 1).otherwise(0)).alias("type_diff"),
        F.count("given_hops").alias("hops"),
        F.sum(F.when(F.col("given_hops") != F.col("n_hops").cast("string"), 1).otherwise(0)).alias("hops_diff"),
    ).first()
    if not (given["types"] or given["hops"]):
        return None
    return {
        "given_types": given["types"],
        "given_type_mismatch": int(given["type_diff"] or 0),
        "given_hops": given["hops"],
        "given_hops_mismatch": int(given["hops_diff"] or 0),
    }


def set_counts(questions: DataFrame, max_answers: int, answers: bool) -> dict:
    """The question set's summary counts from its table (:func:`as_table`): ``questions`` and the means of
    hops, edges and seeds; with ``answers``, the mean answer-set size and the questions over
    ``max_answers``, whose answer is not in its set, or not evaluated."""
    s = questions.agg(
        F.count("*").alias("n"),
        F.avg("n_hops").alias("hops"),
        F.avg("n_edges").alias("edges"),
        F.avg("n_seeds").alias("seeds"),
        F.sum(F.when(F.col("n_answers") > max_answers, 1).otherwise(0)).alias("over"),
        F.sum(F.when(~F.col("answer_in_set"), 1).otherwise(0)).alias("missing"),
        F.avg("n_answers").alias("answers"),
        F.sum(F.when(F.col("n_answers").isNull(), 1).otherwise(0)).alias("unevaluated"),
    ).first()
    counts = {
        "questions": s["n"],
        "mean_hops": round(s["hops"] or 0.0, 4),
        "mean_edges": round(s["edges"] or 0.0, 4),
        "mean_seeds": round(s["seeds"] or 0.0, 4),
    }
    if answers:
        counts.update(
            mean_answers=round(s["answers"] or 0.0, 4),
            over_max_answers=int(s["over"] or 0),
            answer_not_in_set=int(s["missing"] or 0),
            answers_not_evaluated=int(s["unevaluated"] or 0),
        )
    return counts
