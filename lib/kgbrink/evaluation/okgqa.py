"""OKGQA-P (paper 004) for a model: open-ended answers with a question's subgraph at each perturbation level
as knowledge, judged by G-Eval (§3.2, §3.3, §5.1, Fig. 5; spec 5).

Question texts: JSON Lines ``{"qid", "question", "references"?: [passage, ...]}`` (:func:`question_texts`;
bad lines quarantined with :data:`TEXT_REASONS`). Graphs (:func:`level_graphs`): the ``perturbed`` table of
``okgqa-sweep`` (scope subgraphs: ``method, seed, scope_key, h, r, t, original, levels``) per
``(qid, method, seed)``: level 0.0 the original question subgraph, level p the triples with p in ``levels``.

Records (:func:`records`): ``item_id, qid, method, seed, level, question, references, facts, n_triples``;
``facts`` the graph's triples as DBpedia-style names (:func:`kgbrink.okgqa.answering.entity_name`), at most
``max_facts`` in the order of ``xxhash64(h, r, t)`` (content-seeded, so a triple keeps its place across the
nested levels), ``n_triples`` the graph's size. Context ``none`` (the zero-shot baseline): one record per
question, ``method`` ``"none"``, seed 0, level 0.0, no facts. Prompts: App. A.1.1
(:func:`kgbrink.okgqa.answering.prompt`). Answers: :func:`kgbrink.okgqa.answering.parse` (abstention).

Judging (§3.3, App. A.3): one G-Eval call per answer and criterion (``'Retrieval Context'`` = the question's
``references``), the last ``Score: n`` line parsed; a metric per ``(method, seed, level)`` is the mean score
/ 10 in % over the answers scored (:func:`scores`); :func:`levels` adds g(G) - g(G') (level 0 minus level p)
beside the mean ATS, SC2D and SD2 of ``kg_similarity`` (the "High-level Procedure" of §3.2).
"""

from __future__ import annotations

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType

from kgbrink.core import json_lines
from kgbrink.core.quarantine import mark_repeats, with_line_numbers
from kgbrink.evaluation.calls import messages_json
from kgbrink.okgqa import answering, retrieval

NO_CONTEXT = "none"
TEXT_REASONS = (
    "malformed_json",  # not a JSON object (or a key repeated in it)
    "missing_qid",  # qid and id absent or null
    "bad_qid",  # neither a string nor an integer
    "missing_question",  # question absent, null, not a string or blank
    "bad_references",  # references not a list of strings
    "duplicate_qid",  # every line of a qid after its first
)
ANSWER_SCHEMA = "answer string, abstained boolean"
SCORE_COLUMNS = [
    "model",
    "judge_model",
    "run",
    "setting",
    "method",
    "seed",
    "level",
    "metric",
    "value",
    "n",
    "n_scored",
    "n_responding",
]


def _why(reason: str, detail: str) -> Column:
    return F.struct(F.lit(reason).alias("reason"), F.lit(detail).alias("detail"))


def question_texts(lines: DataFrame) -> DataFrame:
    """``source_file, line_number, qid, question, references, reason, detail`` per non-blank line of
    ``read_lines`` output (``reason`` null for a good line, else the first of :data:`TEXT_REASONS`)."""
    lines = lines.where(F.trim("line") != "")
    record = json_lines.record(F.col("line"))
    qid = json_lines.first_field(record, "qid", "id")
    question = json_lines.field(record, "question")
    references = json_lines.field(record, "references")
    items = json_lines.elements(references)
    fields = lines.select(
        "split",
        "source_file",
        "block_start",
        "row_id",
        json_lines.kind(record).alias("_record"),
        json_lines.kind(qid).alias("_qid_kind"),
        json_lines.as_string(qid).alias("qid"),
        json_lines.kind(question).alias("_question_kind"),
        F.try_variant_get(question, "$", "string").alias("_question"),
        json_lines.kind(references).alias("_references_kind"),
        F.transform(items, lambda item: F.try_variant_get(item, "$", "string")).alias("_references"),
        json_lines.first_not(items, ("string",)).alias("_bad_reference"),
    )
    kind, references_kind = F.col("_qid_kind"), F.col("_references_kind")
    verdict = (
        F.when(F.col("_record").isNull() | (F.col("_record") != "object"), _why(*_MALFORMED))
        .when(kind.isNull() | (kind == "null"), _why("missing_qid", "qid and id absent or null"))
        .when(~kind.isin("string", "integer"), _why("bad_qid", "qid must be a string or an integer"))
        .when(
            (F.col("_question_kind") != "string") | F.col("_question_kind").isNull() | (F.trim("_question") == ""),
            _why("missing_question", "question must be a non-blank string"),
        )
        .when(
            references_kind.isNotNull()
            & (references_kind != "null")
            & ((references_kind != "array") | F.col("_bad_reference").isNotNull()),
            _why("bad_references", "references must be a list of strings"),
        )
    )
    parsed = fields.withColumn("_v", verdict).select(
        "split",
        "source_file",
        "block_start",
        "row_id",
        "qid",
        F.when(F.col("_v").isNull(), F.col("_question")).alias("question"),
        F.when(F.col("_v").isNull(), F.coalesce(F.col("_references"), F.array().cast("array<string>"))).alias(
            "references"
        ),
        F.col("_v.reason").alias("reason"),
        F.col("_v.detail").alias("detail"),
    )
    numbered = with_line_numbers(parsed)
    numbered = numbered.select("source_file", "line_number", "qid", "question", "references", "reason", "detail")
    return mark_repeats(numbered, "qid", "duplicate_qid")


_MALFORMED = ("malformed_json", "not a JSON object with unique keys")


def level_graphs(perturbed: DataFrame, perturbations: DataFrame) -> DataFrame:
    """``qid, method, seed, level, h, r, t``: each ``(qid, method, seed)``'s original graph at level 0.0 and
    its graph at every level of ``perturbations`` (``method, level, seed``); a graph left empty (ED at 1.0)
    is one row with null ``h, r, t``."""
    base = perturbed.select(F.col("scope_key").alias("qid"), "method", "seed", "h", "r", "t", "original", "levels")
    original = base.filter("original").select("qid", "method", "seed", F.lit(0.0).alias("level"), "h", "r", "t")
    at_levels = base.select("qid", "method", "seed", F.explode("levels").alias("level"), "h", "r", "t")
    keys = ["qid", "method", "seed", "level"]
    every = (
        base.select("qid", "method", "seed")
        .distinct()
        .join(perturbations.select("method", "seed", "level").distinct(), ["method", "seed"])
    )
    empty = every.join(at_levels.select(*keys).distinct(), keys, "left_anti").select(
        *keys, *[F.lit(None).cast("int").alias(c) for c in ("h", "r", "t")]
    )
    return original.unionByName(at_levels).unionByName(empty)


def _names(frame: DataFrame, column: str) -> DataFrame:
    """``id, name`` of a dictionary (``id, key, label``) restricted to the ids of ``frame[column]``."""

    @F.pandas_udf("string")
    def name(labels: pd.Series, keys: pd.Series) -> pd.Series:
        return pd.Series([answering.entity_name(label, key) for label, key in zip(labels, keys)], dtype=object)

    return frame.select(name("label", "key").alias("name"), F.col("id").alias(column))


KEYS = ["qid", "method", "seed", "level"]


def named_triples(graphs: DataFrame, entities: DataFrame, relations: DataFrame) -> DataFrame:
    """``qid, method, seed, level, h, r, t, h_name, name, t_name``: the triples of ``graphs`` with their
    DBpedia-style names (an emptied graph's null row dropped)."""
    named = graphs.join(F.broadcast(_names(relations, "r")), "r")
    for part in ("h", "t"):
        used = named.select(F.col(part).alias("id")).distinct().join(entities, "id")
        named = named.join(_names(used, part).withColumnRenamed("name", f"{part}_name"), part)
    return named


def embedding_items(named: DataFrame, questions: DataFrame) -> DataFrame:
    """``item_id, messages``: each distinct text retrieval embeds, the asked questions' (``qid, question``)
    and the names of their graphs' nodes and relations (:func:`named_triples`); ``item_id`` the text,
    ``messages`` the JSON list of it, an embeddings request's ``input``."""
    asked = questions.join(named.select("qid").distinct(), "qid").select(F.col("question").alias("text"))
    texts = asked
    for column in ("h_name", "name", "t_name"):
        texts = texts.unionByName(named.select(F.col(column).alias("text")))
    return texts.distinct().select(F.col("text").alias("item_id"), F.to_json(F.array("text")).alias("messages"))


def vectors(answered: DataFrame) -> DataFrame:
    """``text, vector``: each embedded text (``item_id``) with its vector, from the answer's ``content`` (the
    client's JSON list of one vector per input)."""
    return answered.select(
        F.col("item_id").alias("text"), F.from_json("content", "array<array<double>>")[0].alias("vector")
    )


@F.pandas_udf(DoubleType())
def _cosine(left: pd.Series, right: pd.Series) -> pd.Series:
    """Cosine similarity (:func:`kgbrink.okgqa.answering.cosine`); null for vectors of different lengths."""
    out = [
        answering.cosine(u, v) if u is not None and v is not None and len(u) == len(v) else None
        for u, v in zip(left, right)
    ]
    return pd.Series(out, dtype=object)


def similarities(named: DataFrame, questions: DataFrame, embedded: DataFrame) -> DataFrame:
    """``qid, kind, id, similarity``: the cosine similarity of each question's vector to each node's
    (``kind`` node, ``id`` the entity) and relation's (``relation``) of its graphs, by their names' vectors
    (``embedded``: ``text, vector``); a text without a vector has no row."""
    pairs = named.select("qid", F.lit("relation").alias("kind"), F.col("r").alias("id"), F.col("name").alias("text"))
    for part in ("h", "t"):
        nodes = named.select("qid", F.lit("node").alias("kind"), F.col(part).alias("id"), F.col(f"{part}_name"))
        pairs = pairs.unionByName(nodes.withColumnRenamed(f"{part}_name", "text"))
    asked = questions.join(embedded.withColumnRenamed("text", "question"), "question")
    joined = pairs.distinct().join(asked.select("qid", F.col("vector").alias("q")), "qid").join(embedded, "text")
    scored = joined.select("qid", "kind", "id", _cosine("q", "vector").alias("similarity"))
    return scored.filter(F.col("similarity").isNotNull())


def retrieved_facts(named: DataFrame, similarity: DataFrame, context: str, k: int, max_edges: int, max_paths: int):
    """``qid, method, seed, level, facts``: each graph's retrieved triples (``context`` triplets, paths or pcst,
    :func:`kgbrink.okgqa.retrieval.by_similarity`, nodes and relations told apart by id, ties by id) as
    ``[h, r, t]`` names in retrieval order; a graph whose question has no vector retrieves nothing."""
    nodes = similarity.filter("kind = 'node'").select("qid", "id", "similarity")
    relation = similarity.filter("kind = 'relation'").select("qid", F.col("id").alias("r"), "similarity")
    rows = named.join(relation.withColumnRenamed("similarity", "r_sim"), ["qid", "r"], "left")
    for part in ("h", "t"):
        side = nodes.select("qid", F.col("id").alias(part), F.col("similarity").alias(f"{part}_sim"))
        rows = rows.join(side, ["qid", part], "left")
    columns = ["h", "r", "t", "h_name", "name", "t_name", "h_sim", "r_sim", "t_sim"]

    def retrieve(frame: pd.DataFrame) -> pd.DataFrame:
        names, node_sims, relation_sims, triples = {}, {}, {}, []
        for h, r, t, h_name, r_name, t_name, h_sim, r_sim, t_sim in frame[columns].itertuples(index=False):
            triple = (str(h), str(r), str(t))
            triples.append(triple)
            names[triple] = [h_name, r_name, t_name]
            for item, value, target in ((triple[0], h_sim, node_sims), (triple[2], t_sim, node_sims)):
                if not pd.isna(value):
                    target[item] = float(value)
            if not pd.isna(r_sim):
                relation_sims[triple[1]] = float(r_sim)
        found = retrieval.by_similarity(context, triples, node_sims, relation_sims, k, max_edges, max_paths)
        head = frame.iloc[0]
        return pd.DataFrame([{**{key: head[key] for key in KEYS}, "facts": [names[t] for t in found]}])

    schema = "qid string, method string, seed int, level double, facts array<array<string>>"
    return rows.select(*KEYS, *columns).groupBy(*KEYS).applyInPandas(retrieve, schema)


def records(
    graphs: DataFrame | None,
    questions: DataFrame,
    entities: DataFrame,
    relations: DataFrame,
    max_facts: int,
    retrieved: DataFrame | None = None,
) -> DataFrame:
    """The records of the module docstring: one per ``(qid, method, seed, level)`` of ``graphs`` whose qid
    has a text in ``questions`` (``qid, question, references``), or one per question when ``graphs`` is None
    (context none); ``retrieved`` (:func:`retrieved_facts`): each graph's facts in place of its triples."""
    texts = questions.select("qid", "question", "references")
    if graphs is None:
        items = texts.select(
            "qid",
            F.lit(NO_CONTEXT).alias("method"),
            F.lit(0).alias("seed"),
            F.lit(0.0).alias("level"),
            "question",
            "references",
            F.lit(None).cast("array<array<string>>").alias("facts"),
            F.lit(0).cast("bigint").alias("n_triples"),
        )
    else:
        graphs = graphs.join(texts.select("qid"), "qid")
        named = named_triples(graphs, entities, relations)
        fact = F.struct(
            F.xxhash64("h", "r", "t").alias("order"),
            "h",
            "r",
            "t",
            F.array("h_name", "name", "t_name").alias("names"),
        )
        keys = KEYS
        if retrieved is None:
            facts = F.array_sort(F.collect_list(fact)).alias("facts")
            grouped = named.groupBy(*keys).agg(facts, F.count("*").alias("n"))
        else:  # already names, in retrieval order
            grouped = named.groupBy(*keys).agg(F.count("*").alias("n")).join(retrieved, keys, "left")
            grouped = grouped.withColumn("facts", F.transform("facts", lambda x: F.struct(x.alias("names"))))
        # an emptied graph (ED at level 1.0) has no triple left: its record gets no facts
        every = graphs.select(*keys).distinct().join(grouped, keys, "left")
        items = every.join(texts, "qid").select(
            *keys,
            "question",
            "references",
            F.coalesce(
                F.transform(F.slice("facts", 1, int(max_facts)), lambda x: x["names"]),
                F.array().cast("array<array<string>>"),
            ).alias("facts"),
            F.coalesce("n", F.lit(0)).cast("bigint").alias("n_triples"),
        )
    item_id = F.to_json(F.struct("qid", "method", "seed", "level"))
    return items.select(item_id.alias("item_id"), "*")


def prompts(records: DataFrame, template=None, cot: bool = False) -> DataFrame:
    """``item_id, messages``: App. A.1.1's messages of every record (no facts: the zero-shot baseline;
    ``cot``: with "Let's think step by step." after the last ``Answer:``)."""

    @F.pandas_udf("string")
    def build(questions: pd.Series, facts: pd.Series) -> pd.Series:
        out = []
        for question, given in zip(questions, facts):
            record = {"question": question, "facts": None if given is None else [list(f) for f in given]}
            out.append(messages_json(answering.prompt(record, template, cot=cot)))
        return pd.Series(out, dtype=object)

    return records.select("item_id", build("question", "facts").alias("messages"))


def sc_prompts(records: DataFrame, samples: DataFrame) -> DataFrame:
    """``item_id, messages``: the self-consistency selection of every record (``item_id, question``) that has
    sampled answers (``samples``: ``item_id, answers`` in sample order;
    :func:`kgbrink.okgqa.answering.sc_select_prompt`)."""

    @F.pandas_udf("string")
    def build(questions: pd.Series, answers: pd.Series) -> pd.Series:
        out = [messages_json(answering.sc_select_prompt(q, list(a))) for q, a in zip(questions, answers)]
        return pd.Series(out, dtype=object)

    joined = records.select("item_id", "question").join(samples, "item_id")
    return joined.select("item_id", build("question", "answers").alias("messages"))


def answers(answered: DataFrame) -> DataFrame:
    """``item_id, answer, abstained`` of answered prompts (``item_id, content``): spec 5.2's abstention."""

    @F.pandas_udf(ANSWER_SCHEMA)
    def parse(contents: pd.Series) -> pd.DataFrame:
        rows = [answering.parse(content) for content in contents]
        return pd.DataFrame([(r["answer"], r["abstained"]) for r in rows], columns=["answer", "abstained"])

    return answered.select("item_id", parse("content").alias("p")).select("item_id", "p.*")


def judge_prompts(answers: DataFrame, criteria: list[str], template: str | None = None) -> DataFrame:
    """``item_id, answer_id, criterion, messages``: G-Eval's messages per answer (``item_id, question,
    answer, references``) and criterion; ``item_id`` = JSON ``[answer item_id, criterion]``."""
    for criterion in criteria:
        if criterion not in answering.CRITERIA:
            raise ValueError(f"criterion must be one of {', '.join(answering.CRITERIA)}, got {criterion!r}")

    @F.pandas_udf("string")
    def build(criterion: pd.Series, question: pd.Series, answer: pd.Series, references: pd.Series) -> pd.Series:
        out = []
        for c, q, a, passages in zip(criterion, question, answer, references):
            record = {"question": q, "answer": a, "passages": list(passages) if passages is not None else []}
            out.append(messages_json(answering.geval_prompt(record, c, template)))
        return pd.Series(out, dtype=object)

    per = answers.crossJoin(
        F.broadcast(answers.sparkSession.createDataFrame([(c,) for c in criteria], "criterion string"))
    )
    return per.select(
        F.to_json(F.array("item_id", "criterion")).alias("item_id"),
        F.col("item_id").alias("answer_id"),
        "criterion",
        build("criterion", "question", "answer", "references").alias("messages"),
    )


def judged(answered: DataFrame) -> DataFrame:
    """``item_id, score``: the G-Eval score (0..10, null when no ``Score:`` line parses) of judge answers
    (``item_id, content``)."""

    @F.pandas_udf("int")
    def score(contents: pd.Series) -> pd.Series:
        return pd.Series([answering.geval_score(content) for content in contents], dtype="Int32")

    return answered.select("item_id", score("content").alias("score"))


def scores(answers: DataFrame, judgements: DataFrame, criteria: list[str], labels: dict) -> DataFrame:
    """Rows of ``okgqa_scores`` (:data:`SCORE_COLUMNS`): per ``(method, seed, level)`` and criterion the
    mean G-Eval score / 10 in % over the answers scored (``value`` null when none is), ``n`` answers,
    ``n_scored``, ``n_responding`` (not abstaining). ``answers``: ``item_id, method, seed, level,
    abstained``; ``judgements``: ``answer_id, criterion, score``; ``criteria``: those judged (a criterion
    no judge answered has its rows, ``n_scored`` 0); ``labels``: ``model, judge_model, run, setting``."""
    keys = ["method", "seed", "level"]
    asked = answers.sparkSession.createDataFrame([(c,) for c in criteria], "criterion string")
    pairs = answers.crossJoin(F.broadcast(asked)).join(
        judgements.select(F.col("answer_id").alias("item_id"), "criterion", "score"), ["item_id", "criterion"], "left"
    )
    grouped = pairs.groupBy(*keys, "criterion").agg(
        F.count("*").alias("n"),
        F.count("score").alias("n_scored"),
        F.sum(F.when(~F.col("abstained"), 1).otherwise(0)).alias("n_responding"),
        (F.avg("score") * 10.0).alias("value"),
    )
    return grouped.select(
        *[F.lit(labels[k]).alias(k) for k in ("model", "judge_model", "run", "setting")],
        *keys,
        F.concat(F.lit("geval_"), F.col("criterion")).alias("metric"),
        "value",
        "n",
        "n_scored",
        F.col("n_responding").cast("bigint").alias("n_responding"),
    )


def levels(score_rows: DataFrame, similarity: DataFrame | None, asked: DataFrame | None = None) -> DataFrame:
    """``method, level, metric, value, drop, seeds, ats, sc2d, sd2``: the scores' means over seeds per
    ``(method, level, metric)``, ``drop`` = g(G) - g(G') (the same seed's level 0.0 minus level p, then
    averaged), beside the mean ATS, SC2D and SD2 of ``kg_similarity`` (subgraph rows) at that level, over the
    ``asked`` questions' graphs only (``qid, method, seed, level``; None: every question's)."""
    base = score_rows.filter(F.col("level") == 0.0).select("method", "seed", "metric", F.col("value").alias("original"))
    per_seed = score_rows.join(base, ["method", "seed", "metric"], "left").withColumn(
        "drop", F.col("original") - F.col("value")
    )
    out = per_seed.groupBy("method", "level", "metric").agg(
        F.avg("value").alias("value"), F.avg("drop").alias("drop"), F.countDistinct("seed").alias("seeds")
    )
    if similarity is None:
        return out.select("*", *[F.lit(None).cast("double").alias(c) for c in ("ats", "sc2d", "sd2")])
    # level 0.0 (the original graph) has no kg_similarity row: its ATS, SC2D and SD2 stay null
    graphs = similarity.filter(F.col("qid").isNotNull())
    if asked is not None:
        graphs = graphs.join(
            asked.select("qid", "method", "seed", "level").distinct(), ["qid", "method", "seed", "level"]
        )
    means = graphs.groupBy("method", "level").agg(*[F.avg(c).alias(c) for c in ("ats", "sc2d", "sd2")])
    return out.join(means, ["method", "level"], "left")


# --- FActScore (spec 5.3) -------------------------------------------------------------------------------


def knowledge(records_at_zero: DataFrame) -> DataFrame:
    """``qid, knowledge, references, question``: FActScore's knowledge source per question, the facts of its
    original subgraph (the records of level 0.0, the same for every method and seed) and its references."""
    return records_at_zero.select("qid", F.col("facts").alias("knowledge"), "references", "question").dropDuplicates(
        ["qid"]
    )


def fact_prompts(answers: DataFrame, template=None) -> DataFrame:
    """``item_id, messages``: the splitter's messages of every answer that does not abstain (``item_id,
    answer, abstained``)."""

    @F.pandas_udf("string")
    def build(texts: pd.Series) -> pd.Series:
        return pd.Series([messages_json(answering.facts_prompt(t, template)) for t in texts], dtype=object)

    return answers.filter(~F.col("abstained")).select("item_id", build("answer").alias("messages"))


def atomic_facts(answered: DataFrame, limit: int) -> DataFrame:
    """``item_id, facts``: the atomic facts of the splitter's answers (``item_id, content``), at most ``limit``."""

    @F.pandas_udf("array<string>")
    def split(contents: pd.Series) -> pd.Series:
        return pd.Series([answering.atomic_facts(c, limit) for c in contents], dtype=object)

    return answered.select("item_id", split("content").alias("facts"))


def verify_prompts(facts: DataFrame, answers: DataFrame, sources: DataFrame, template=None) -> DataFrame:
    """``item_id, answer_id, messages``: one verification per atomic fact (``facts``: ``item_id, facts`` by
    answer; ``answers``: ``item_id, qid``; ``sources``: :func:`knowledge`); ``item_id`` = JSON ``[answer
    item_id, fact index]``."""

    @F.pandas_udf("string")
    def build(question: pd.Series, fact: pd.Series, known: pd.Series, references: pd.Series) -> pd.Series:
        out = []
        for q, text, triples, passages in zip(question, fact, known, references):
            context = answering.verify_context(
                [list(t) for t in triples] if triples is not None else [],
                list(passages) if passages is not None else [],
            )
            out.append(messages_json(answering.verify_prompt(q, text, context, template)))
        return pd.Series(out, dtype=object)

    return fact_rows(facts, answers, sources).select(
        "item_id", "answer_id", build("question", "fact", "knowledge", "references").alias("messages")
    )


def fact_rows(facts: DataFrame, answers: DataFrame, sources: DataFrame) -> DataFrame:
    """``item_id, answer_id, fact`` and the columns of ``sources``: one row per atomic fact (``facts``:
    ``item_id, facts`` by answer; ``answers``: ``item_id, qid``; ``sources``: :func:`knowledge`), ``item_id``
    = JSON ``[answer item_id, fact index]``."""
    each = facts.select(F.col("item_id").alias("answer_id"), F.posexplode("facts").alias("index", "fact"))
    joined = each.join(answers.select(F.col("item_id").alias("answer_id"), "qid"), "answer_id").join(sources, "qid")
    item_id = F.to_json(F.array("answer_id", F.col("index").cast("string"))).alias("item_id")
    return joined.select(item_id, "answer_id", "fact", *[c for c in sources.columns if c != "qid"])


def verdicts(answered: DataFrame) -> DataFrame:
    """``item_id, supported`` of the verifier's answers (``item_id, content``; :func:`answering.is_supported`)."""

    @F.pandas_udf("boolean")
    def read(contents: pd.Series) -> pd.Series:
        return pd.Series([answering.is_supported(c) for c in contents], dtype=object)

    return answered.select("item_id", read("content").alias("supported"))


def factscore_rows(answers: DataFrame, verified: DataFrame, gamma: float | None, labels: dict) -> DataFrame:
    """Rows of ``okgqa_scores`` with metric ``factscore``: per ``(method, seed, level)`` the mean FActScore
    in % over the answers with atomic facts (``value`` null when none has), ``n`` answers, ``n_scored`` =
    ``n_responding`` = those with a score. An answer's score: supported / total over its verified facts, with
    the length penalty when ``gamma`` is given (:func:`answering.factscore`); an abstention, an answer without
    atomic facts or whose facts got no verdict has none. ``answers``: ``item_id, method, seed, level``;
    ``verified``: ``answer_id, supported``."""

    @F.pandas_udf("double")
    def score(n_supported: pd.Series, n_total: pd.Series) -> pd.Series:
        return pd.Series(
            [answering.factscore(int(s), int(t), gamma) if t else None for s, t in zip(n_supported, n_total)],
            dtype=object,
        )

    per_answer = verified.groupBy(F.col("answer_id").alias("item_id")).agg(
        F.count("*").alias("n_total"), F.sum(F.col("supported").cast("int")).alias("n_supported")
    )
    scored = answers.join(per_answer, "item_id", "left").withColumn(
        "fs", score(F.coalesce("n_supported", F.lit(0)), F.coalesce("n_total", F.lit(0)))
    )
    keys = ["method", "seed", "level"]
    grouped = scored.groupBy(*keys).agg(
        F.count("*").alias("n"), F.count("fs").alias("n_scored"), (F.avg("fs") * 100.0).alias("value")
    )
    return grouped.select(
        *[F.lit(labels[k]).alias(k) for k in ("model", "judge_model", "run", "setting")],
        *keys,
        F.lit("factscore").alias("metric"),
        "value",
        "n",
        "n_scored",
        F.col("n_scored").alias("n_responding"),
    )
