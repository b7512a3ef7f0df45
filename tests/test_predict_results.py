"""Properties of predict's summaries over random inputs (issue 58): OKGQA-P's per-level means beside the asked
graphs' similarity (``evaluation.okgqa.levels``) against a plain-Python recomputation, and the release's
leaderboard (``release.results.leaderboard``) read back cell by cell whatever the names hold."""

from __future__ import annotations

import json
import math
import unicodedata
from collections import defaultdict

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kgbrink.evaluation import okgqa
from kgbrink.release.results import MAX_COLUMNS, leaderboard

METHODS, SEEDS, LEVELS, QIDS = ("RR", "ED"), (1, 2), (0.0, 0.5, 1.0), ("q0", "q1", "q2")
METRICS = ("geval_correctness", "geval_empowerment")
SCORE_SCHEMA = "method string, seed int, level double, metric string, value double"
SIMILARITY_SCHEMA = "qid string, method string, seed int, level double, ats double, sc2d double, sd2 double"
ASKED_SCHEMA = "qid string, method string, seed int, level double"

values = st.one_of(st.none(), st.floats(0, 100, allow_nan=False).map(lambda v: round(v, 3)))


@st.composite
def level_inputs(draw):
    keys = [(m, s, lv, x) for m in METHODS for s in SEEDS for lv in LEVELS for x in METRICS]
    scores = [(*k, draw(values)) for k in draw(st.lists(st.sampled_from(keys), unique=True, max_size=len(keys)))]
    graphs = [(q, m, s, lv) for q in QIDS for m in METHODS for s in SEEDS for lv in LEVELS if lv > 0]
    triple = st.tuples(*[st.floats(0, 1, allow_nan=False).map(lambda v: round(v, 4))] * 3)
    similarity = [(*g, *draw(triple)) for g in draw(st.lists(st.sampled_from(graphs), unique=True))]
    everything = [(q, m, s, lv) for q in QIDS for m in METHODS for s in SEEDS for lv in LEVELS]
    asked = draw(st.none() | st.lists(st.sampled_from(everything), unique=True))
    return scores, similarity, asked


def _mean(numbers):
    numbers = [n for n in numbers if n is not None]
    return sum(numbers) / len(numbers) if numbers else None


def _expected_levels(scores, similarity, asked):
    """``{(method, level, metric): (value, drop, seeds, ats, sc2d, sd2)}`` computed row by row."""
    original = {(m, s, x): v for m, s, lv, x, v in scores if lv == 0.0}
    groups = defaultdict(list)
    for m, s, lv, x, v in scores:
        base = original.get((m, s, x))
        groups[(m, lv, x)].append((s, v, None if base is None or v is None else base - v))
    chosen = [row for row in similarity if asked is None or tuple(row[:4]) in set(asked)]
    expected = {}
    for (m, lv, x), rows in groups.items():
        graphs = [row for row in chosen if (row[1], row[3]) == (m, lv)]
        means = tuple(_mean([row[i] for row in graphs]) for i in (4, 5, 6))
        value, drop = _mean([v for _, v, _ in rows]), _mean([d for _, _, d in rows])
        expected[(m, lv, x)] = (value, drop, len({s for s, _, _ in rows}), *means)
    return expected


def _close(a, b) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and math.isclose(a, b, abs_tol=1e-9))


@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.generate],
    suppress_health_check=list(HealthCheck),
)
@given(inputs=level_inputs())
def test_levels_are_seed_means_beside_the_asked_graphs_similarity(spark, inputs):
    scores, similarity, asked = inputs
    frames = [spark.createDataFrame(scores, SCORE_SCHEMA), spark.createDataFrame(similarity, SIMILARITY_SCHEMA)]
    asked_frame = None if asked is None else spark.createDataFrame(asked, ASKED_SCHEMA)
    got = {
        (r.method, r.level, r.metric): (r.value, r.drop, r.seeds, r.ats, r.sc2d, r.sd2)
        for r in okgqa.levels(*frames, asked_frame).collect()
    }
    expected = _expected_levels(scores, similarity, asked)
    assert set(got) == set(expected)
    for key, row in expected.items():
        assert all(_close(a, b) for a, b in zip(got[key], row, strict=True)), (key, got[key], row)


def _read_cells(line: str) -> list[str]:
    """A Markdown table row's cells: a backslash keeps the next character, an unescaped pipe ends a cell."""
    cells, text, escaped = [], "", False
    for char in line.strip()[1:]:
        if escaped:
            text, escaped = text + char, False
        elif char == "\\":
            escaped = True
        elif char == "|":
            cells.append(text.strip())
            text = ""
        else:
            text += char
    return cells


def _plain(text: str) -> str:
    return "".join(
        " " if unicodedata.category(c)[0] == "C" or unicodedata.category(c) in ("Zl", "Zp") else c for c in text
    )


names = st.text(st.characters(exclude_categories=("Cs",)), max_size=8) | st.sampled_from(["a|b", "x\\", "\\|", "l\nm"])
result_rows = st.fixed_dictionaries(
    {
        "benchmark": st.sampled_from(["brink", "okgqa", "probekgc"]),
        "name": names,
        "model": names,
        "judge_model": st.none() | names,
        "setting": st.sampled_from(["none", "subgraph"]),
        "run": st.sampled_from(["1", "2"]),
        "labels": st.dictionaries(st.sampled_from(["level", "method"]), st.integers(0, 3)).map(
            lambda d: json.dumps(d, sort_keys=True)
        ),
        "fingerprint": st.sampled_from(["0123456789abcdef", "fedcba9876543210"]),
        "metric": st.sampled_from([f"m{i:02d}" for i in range(MAX_COLUMNS + 3)]),
        "value": st.none() | st.floats(-1e6, 1e6, allow_nan=False),
    }
)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(rows=st.lists(result_rows, max_size=25))
def test_every_run_is_one_row_of_its_benchmark_with_its_own_values(rows):
    text = leaderboard(rows)
    runs = defaultdict(dict)
    for row in rows:  # a run's later row of one metric wins, as in the table
        key = tuple(row[k] or "" for k in ("name", "model", "judge_model", "setting", "run", "labels", "fingerprint"))
        runs[(row["benchmark"], key)][row["metric"]] = row["value"]
    tables = [block for block in text.split("Scores on ") if block]
    assert [block.split(":", 1)[0] for block in tables] == sorted({r["benchmark"] for r in rows})
    for block in tables:
        benchmark = block.split(":", 1)[0]
        table = [line for line in block.splitlines() if line.startswith("|")]
        header = _read_cells(table[0])
        shown = sorted({r["metric"] for r in rows if r["benchmark"] == benchmark})[:MAX_COLUMNS]
        assert header == ["set", "model", "judge", "setting", "run", "labels", "id", *shown]
        body = [_read_cells(line) for line in table[2:]]
        ours = {key: metrics for (b, key), metrics in runs.items() if b == benchmark}
        assert len(body) == len(ours) and all(len(cells) == len(header) for cells in body)
        for key, metrics in ours.items():
            labels = ", ".join(f"{k}={v}" for k, v in json.loads(key[5]).items())
            wanted = [_plain(part) for part in key[:5]] + [labels, key[6][:8]]
            wanted = [w.strip() for w in wanted]
            wanted += ["" if metrics.get(m) is None else f"{metrics[m]:.4f}" for m in shown]
            assert body.count(wanted) >= 1, (wanted, body)
