"""The peer for the mining benchmark: kgbrink's mining plan, run as DuckDB SQL on the same triples.

Same semantics and the same plan as :mod:`kgbrink.rules.mining` (so the time ratio compares engines, not
algorithms): relation profile; one-atom supports and expansion sizes from (entity, relation) degrees;
the same per-fact choice of the side to expand from (start groups by the smaller endpoint degree), in
as many hash buckets of head facts (``mining.rows_per_batch`` expanded rows each; DuckDB's hash);
supports of every shape, joining each expanding atom on (relation, bound variable) with its surviving
relations only; the same skip of maximal-length chain bodies whose lower bound of distinct pairs,
max_z d0(z) d1(z), already exceeds support / min_std_confidence (``mining.affordable_bodies``, applied
under the same condition: edges² > max_body_paths; such rules get no body size, as in kgbrink); body and
PCA body sizes of the other candidates (without kgbrink's ``max_body_paths`` failure); AMIE's selection
with ``kgbrink.rules.selection.amie_selection``.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from pathlib import Path

import duckdb

from kgbrink.rules import mining, plan, selection, supports
from kgbrink.rules.model import HEAD_VARIABLES, Atom, Rule
from kgbrink.rules.plan import Shape, X, Y, atom_order, body_shapes, single_pattern
from kgbrink.rules.supports import min_support_count


def delta_files(table: Path) -> list[str]:
    """The Parquet files of a Delta table's latest version (add minus remove actions of its log)."""
    live: set[str] = set()
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                live.add(action["add"]["path"])
            elif "remove" in action:
                live.discard(action["remove"]["path"])
    return [str(table / p) for p in sorted(live)]


def _var_sql(v: int, where: dict[int, str]) -> str:
    return where[v]


def _costs_sql(shape: Shape) -> dict[int, str]:
    """Per expanding head atom, the bound endpoint's degree in its role (``supports._endpoint_degree``)."""
    return {
        k: (f"hf.out{a[0]}" if a[0] in (X, Y) else f"hf.in{a[1]}")
        for k in plan.expanding_head_atoms(shape)
        for a in [shape.atoms[k]]
    }


def _start_sql(shape: Shape) -> str | None:
    """The per-fact choice of ``kgbrink.rules.supports.shape_supports``: the expanding head atom whose endpoint
    has the fewest edges in its role (ties: the first)."""
    cost = _costs_sql(shape)
    expanding = list(cost)
    if not expanding:
        return None
    whens = []
    for k in expanding[:-1]:
        cond = " AND ".join(f"{cost[k]} <= {cost[j]}" for j in expanding if j != k)
        whens.append(f"WHEN {cond} THEN {k}")
    return f"CASE {' '.join(whens)} ELSE {expanding[-1]} END"


def _buckets(con, shape: Shape, relations: list[int], rows_per_batch: int) -> int:
    """``supports.batched_shape_supports``' bucket count: Sum over facts of the cheapest expansion, per
    ``rows_per_batch``."""
    cost = _costs_sql(shape)
    if not cost or not relations:
        return 1
    least = f"least({', '.join(cost.values())})" if len(cost) > 1 else next(iter(cost.values()))
    rows = (
        con.execute(f"SELECT sum({least}) FROM hf WHERE hf.r IN ({', '.join(map(str, relations))})").fetchone()[0] or 0
    )
    return max(1, math.ceil(rows / rows_per_batch))


def _supports_sql(shape: Shape, first: int | None, relations: list[int], buckets: int = 1, bucket: int = 0) -> str:
    order = atom_order(shape, first)
    where = {X: "hf.v0", Y: "hf.v1"}
    joins, slots, conds = [], {}, []
    for k in order:
        s, o = shape.atoms[k]
        alias = f"e{k}"
        pattern = single_pattern(shape.atoms[k])
        bound = [(col, v) for col, v in (("s", s), ("o", o)) if v in where]
        on = [f"{alias}.{col} = {where[v]}" for col, v in bound]
        joins.append(f"JOIN e {alias} ON " + " AND ".join(on))
        if pattern is not None:
            joins.append(
                f"JOIN singles al{k} ON al{k}.r = hf.r AND al{k}.subject = {pattern[0]} AND al{k}.object = {pattern[1]} AND al{k}.a = {alias}.rel"
            )
        for col, v in (("s", s), ("o", o)):
            where.setdefault(v, f"{alias}.{col}")
        slots[k] = f"{alias}.rel"
        for j in slots:
            if j != k and shape.atoms[j] == shape.atoms[k]:
                conds.append(f"{slots[min(j, k)]} < {slots[max(j, k)]}")
        if shape.atoms[k] == (X, Y):
            conds.append(f"{alias}.rel <> hf.r")
    slot_list = ", ".join(f"{slots[k]} AS a{k}" for k in range(len(shape.atoms)))
    group = ", ".join(slots[k] for k in range(len(shape.atoms)))
    start = _start_sql(shape)
    where_sql = " AND ".join(
        [
            f"hf.r IN ({', '.join(map(str, relations))})",
            *([f"({start}) = {first}"] if first is not None else []),
            *([f"hash(hf.v0, hf.v1) % {buckets} = {bucket}"] if buckets > 1 else []),
            *conds,
        ]
    )
    return (
        f"SELECT hf.r, {slot_list}, count(DISTINCT (hf.v0, hf.v1)) AS support FROM hf {' '.join(joins)} "
        f"WHERE {where_sql} GROUP BY hf.r, {group}"
    )


def _affordable_sql(shape: Shape, min_std_confidence: float) -> str:
    """The bodies ``a0, a1`` of a maximal-length chain shape kept by ``mining.affordable_bodies``: lower
    bound max_z d0(z) d1(z) <= max support / min_std_confidence."""
    z = supports.path_middle(shape)
    cols = ["out_deg" if s == z else "in_deg" for s, _ in shape.atoms]
    return (
        f"WITH b AS (SELECT a0, a1, max(support) / {min_std_confidence} AS lim FROM cand GROUP BY a0, a1), "
        f"est AS (SELECT b.a0, b.a1, b.lim, max(d0.{cols[0]}::DOUBLE * d1.{cols[1]}) AS lower_bound FROM b "
        f"JOIN deg d0 ON d0.rel = b.a0 AND d0.{cols[0]} > 0 JOIN deg d1 ON d1.entity = d0.entity AND d1.rel = b.a1 AND d1.{cols[1]} > 0 "
        f"GROUP BY b.a0, b.a1, b.lim) SELECT a0, a1 FROM est WHERE lower_bound <= lim"
    )


def _body_sql(shape: Shape) -> str:
    order = plan.body_atom_order(shape)
    first = order[0]
    s, o = shape.atoms[first]
    where = {s: f"e{first}.s", o: f"e{first}.o"}
    joins = [f"JOIN e e{first} ON e{first}.rel = b.a{first}"]
    for k in order[1:]:
        s, o = shape.atoms[k]
        on = [f"e{k}.rel = b.a{k}"] + [f"e{k}.{col} = {where[v]}" for col, v in (("s", s), ("o", o)) if v in where]
        joins.append(f"JOIN e e{k} ON " + " AND ".join(on))
        for col, v in (("s", s), ("o", o)):
            where.setdefault(v, f"e{k}.{col}")
    slots = ", ".join(f"b.a{k}" for k in range(len(shape.atoms)))
    pairs = f"SELECT DISTINCT {slots}, {where[X]} AS v0, {where[Y]} AS v1 FROM bodies b {' '.join(joins)}"
    on = " AND ".join(f"p.a{k} = c.a{k}" for k in range(len(shape.atoms)))
    cslots = ", ".join(f"c.a{k}" for k in range(len(shape.atoms)))
    return (
        f"WITH p AS ({pairs}) SELECT c.r, {cslots}, count(*) AS body_size, count(d.entity) AS pca_body_size "
        f"FROM p JOIN cand c ON {on} LEFT JOIN dom d ON d.r = c.r AND d.entity = CASE WHEN c.functional_var = 0 THEN p.v0 ELSE p.v1 END "
        f"GROUP BY c.r, {cslots}"
    )


def mine(
    files: list[str],
    relation_names: dict[int, str],
    params: mining.MiningParams,
    threads: int,
    memory_limit: str = "16GB",
) -> tuple[mining.MiningResult, dict]:
    con = duckdb.connect()
    con.execute(f"SET threads = {threads}; SET memory_limit = '{memory_limit}'; SET preserve_insertion_order = false")
    timings: dict[str, float] = {}
    t = time.perf_counter()
    file_list = ", ".join(f"'{f}'" for f in files)
    con.execute(f"CREATE TABLE e AS SELECT DISTINCT r AS rel, h AS s, t AS o FROM read_parquet([{file_list}])")
    profile = con.execute("SELECT rel, count(*), count(DISTINCT s), count(DISTINCT o) FROM e GROUP BY rel").fetchall()
    facts = {r: n for r, n, _, _ in profile}
    edge_count = sum(facts.values())
    subject_functional = {r: subs >= objs for r, _, subs, objs in profile}
    heads = sorted(r for r, n in facts.items() if n >= params.min_initial_support)
    min_count = {r: min_support_count(facts[r], params) for r in heads}
    con.execute("CREATE TABLE thr (r INTEGER, min_count BIGINT)")
    con.executemany("INSERT INTO thr VALUES (?, ?)", list(min_count.items()))
    con.execute(
        "CREATE TABLE deg AS SELECT entity, rel, sum(od) AS out_deg, sum(id) AS in_deg FROM (SELECT s AS entity, rel, 1 AS od, 0 AS id FROM e UNION ALL SELECT o, rel, 0, 1 FROM e) GROUP BY entity, rel"
    )
    con.execute("CREATE TABLE tot AS SELECT entity, sum(out_deg) AS o, sum(in_deg) AS i FROM deg GROUP BY entity")
    con.execute(
        "CREATE TABLE hf AS SELECT e.rel AS r, e.s AS v0, e.o AS v1, t0.o AS out0, t0.i AS in0, t1.o AS out1, t1.i AS in1 FROM e JOIN thr ON thr.r = e.rel JOIN tot t0 ON t0.entity = e.s JOIN tot t1 ON t1.entity = e.o"
    )
    single_sql = []
    for var, col in ((X, "v0"), (Y, "v1")):
        single_sql.append(
            f"SELECT hf.r, {var} AS subject, 2 AS object, d.rel AS a, count(*) FILTER (WHERE d.out_deg > 0) AS support, sum(d.out_deg) AS rows FROM hf JOIN deg d ON d.entity = hf.{col} GROUP BY hf.r, d.rel"
        )
        single_sql.append(
            f"SELECT hf.r, 2 AS subject, {var} AS object, d.rel AS a, count(*) FILTER (WHERE d.in_deg > 0) AS support, sum(d.in_deg) AS rows FROM hf JOIN deg d ON d.entity = hf.{col} GROUP BY hf.r, d.rel"
        )
    for (s, o), (cs, co) in (((X, Y), ("v0", "v1")), ((Y, X), ("v1", "v0"))):
        extra = " AND e.rel <> hf.r" if (s, o) == (X, Y) else ""
        single_sql.append(
            f"SELECT hf.r, {s} AS subject, {o} AS object, e.rel AS a, count(*) AS support, count(*) AS rows FROM hf JOIN e ON e.s = hf.{cs} AND e.o = hf.{co}{extra} GROUP BY hf.r, e.rel"
        )
    con.execute(
        f"CREATE TABLE singles AS SELECT s.* FROM ({' UNION ALL '.join(single_sql)}) s JOIN thr ON thr.r = s.r WHERE s.support >= thr.min_count"
    )
    survivors: dict = {}
    rows: dict = {}
    for r, subject, obj, a, _support, n in con.execute("SELECT * FROM singles").fetchall():
        survivors.setdefault((r, (subject, obj)), []).append(a)
        rows[(r, (subject, obj))] = rows.get((r, (subject, obj)), 0) + n
    con.execute(
        "CREATE TABLE dom AS SELECT DISTINCT hf.r, CASE WHEN f.functional THEN hf.v0 ELSE hf.v1 END AS entity FROM hf JOIN (SELECT * FROM (VALUES "
        + ", ".join(f"({r}, {str(subject_functional[r]).lower()})" for r in heads)
        + ") v(r, functional)) f ON f.r = hf.r"
    )
    timings["prepare"] = round(time.perf_counter() - t, 1)
    candidates: list[Rule] = []
    for shape in body_shapes(params.max_atoms):
        t = time.perf_counter()
        relations = supports.shape_head_relations(shape, heads, survivors)
        n = len(shape.atoms)
        per_rule: dict[tuple, int] = {}
        buckets = _buckets(con, shape, relations, params.rows_per_batch)
        for bucket in range(buckets):
            for first in plan.expanding_head_atoms(shape) or [None]:
                if relations:  # buckets and start groups partition the facts: their supports add up
                    for row in con.execute(_supports_sql(shape, first, relations, buckets, bucket)).fetchall():
                        per_rule[row[:-1]] = per_rule.get(row[:-1], 0) + row[-1]
        # AMIE's recursivity limit: no relation more than recursivity_limit times, head included
        supported = [
            (*key, support)
            for key, support in per_rule.items()
            if support >= min_count[key[0]] and max(Counter(key).values()) <= params.recursivity_limit
        ]
        timings[f"shape {shape.atoms}"] = round(time.perf_counter() - t, 1)
        if not supported:
            continue
        con.execute(
            "CREATE OR REPLACE TABLE cand (r INTEGER, "
            + ", ".join(f"a{k} INTEGER" for k in range(n))
            + ", support BIGINT, functional_var INTEGER)"
        )
        con.executemany(
            f"INSERT INTO cand VALUES ({', '.join('?' * (n + 3))})",
            [(*row, 0 if subject_functional[row[0]] else 1) for row in supported],
        )
        skip = mining.estimates_bodies(shape, edge_count, params) and mining.drops_by_lower_bound(shape, params)
        bodies = (
            _affordable_sql(shape, params.min_std_confidence)
            if skip
            else "SELECT DISTINCT " + ", ".join(f"a{k}" for k in range(n)) + " FROM cand"
        )
        con.execute(f"CREATE OR REPLACE TABLE bodies AS {bodies}")
        sizes = {tuple(row[: n + 1]): row[n + 1 :] for row in con.execute(_body_sql(shape)).fetchall()}
        for row in supported:
            r, slots, support = row[0], row[1 : n + 1], row[n + 1]
            body_size, pca_body_size = sizes.get((r, *slots), (None, None))
            body = tuple(
                Atom(relation_names[a], plan.variable_name(s), plan.variable_name(o))
                for a, (s, o) in zip(slots, shape.atoms)
            )
            metrics = {
                "support": support,
                "head_coverage": support / facts[r],
                "body_size": body_size,
                "pca_body_size": pca_body_size,
                "functional_variable": HEAD_VARIABLES[0] if subject_functional[r] else HEAD_VARIABLES[1],
                "std_confidence": support / body_size if body_size else None,
                "pca_confidence": support / pca_body_size if pca_body_size else None,
            }
            candidates.append(Rule(Atom(relation_names[r], *HEAD_VARIABLES), body, metrics))
        timings[f"shape {shape.atoms}"] = round(time.perf_counter() - t, 1)  # supports and body sizes
    unique = {c.key(): c for c in candidates}
    selected = selection.amie_selection(list(unique.values()), params)
    counts = {
        "facts": sum(facts.values()),
        "relations": len(facts),
        "head_relations": len(heads),
        "candidates": len(unique),
        "rules": len(selected),
    }
    return mining.MiningResult(
        sorted(unique.values(), key=lambda r: r.key()), sorted(selected, key=lambda r: r.key()), counts
    ), timings


def mine_dataset(dataset: Path, params: mining.MiningParams, threads: int) -> tuple[mining.MiningResult, dict]:
    """:func:`mine` on an ingested kgbrink dataset (its Delta ``triples`` and ``relations`` tables)."""
    import pyarrow.parquet as pq

    names = {r["id"]: r["key"] for r in pq.read_table(delta_files(dataset / "relations")).to_pylist()}
    return mine(delta_files(dataset / "triples"), names, params, threads)


def main() -> None:
    """Mine one ingested dataset with the peer: ``duckdb_mine_peer.py DATASET [--max-atoms N] [--tsv OUT]``
    (thresholds from conf/local.yaml); prints counts, seconds and the slowest shapes as JSON."""
    import argparse
    import dataclasses

    from kgbrink.core.loader import load_config
    from kgbrink.rules.model import write_amie_tsv
    from kgbrink.rules.params import MiningParams

    parser = argparse.ArgumentParser(description=main.__doc__.split("\n")[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--max-atoms", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tsv", type=Path)
    args = parser.parse_args()
    project = Path(__file__).resolve().parent.parent
    params = dataclasses.replace(
        MiningParams.from_settings(load_config(project / "conf" / "local.yaml")), max_atoms=args.max_atoms
    ).validate()
    started = time.perf_counter()
    result, timings = mine_dataset(args.dataset, params, args.threads)
    if args.tsv:
        write_amie_tsv(result.rules, args.tsv)
    slowest = dict(sorted(timings.items(), key=lambda kv: -kv[1])[:5])
    print(
        json.dumps(
            {
                "dataset": str(args.dataset),
                "max_atoms": args.max_atoms,
                "counts": result.counts,
                "seconds": round(time.perf_counter() - started, 1),
                "slowest": slowest,
            }
        )
    )


if __name__ == "__main__":
    main()
