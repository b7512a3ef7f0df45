"""The peer for the ingest and stats benchmarks: the same work in DuckDB, on the same files.

Ingest: read the Wikidata5m triple and alias files as lines, split and validate them exactly as kgbrink
does (3 TAB-separated fields, keys matching the same patterns), count lines per split and bad
lines, de-duplicate, dictionary-encode (Wikidata keys carried as integers, dense ids in key order), take
labels from the alias files, and write entities / relations / triples (partitioned by split) as Parquet.
Stats: the per-(entity, relation) counts, d(e=>r), delta(r|e), per-entity degrees and delta(e), relation
functionality and the degree histogram on train, written as Parquet.
"""

from __future__ import annotations

import time
from pathlib import Path

import duckdb

ENTITY, RELATION = r"Q[1-9][0-9]{0,17}", r"P[1-9][0-9]{0,17}"  # as kgbrink.kg.ingest.WIKIDATA5M


def _lines(path: str) -> str:
    return f"read_csv('{path}', columns={{'line': 'VARCHAR'}}, delim=chr(31), header=false, quote='', escape='', auto_detect=false, compression='auto')"


def connect(threads: int, memory_limit: str = "16GB") -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(f"SET threads = {threads}; SET memory_limit = '{memory_limit}'; SET preserve_insertion_order = false")
    return con


def ingest(con: duckdb.DuckDBPyConnection, kg_dir: str, out: str) -> dict:
    Path(out).mkdir(parents=True, exist_ok=True)
    d = kg_dir.rstrip("/")
    start = time.perf_counter()
    splits = " UNION ALL ".join(
        f"SELECT '{s}' AS split, line FROM {_lines(f'{d}/wikidata5m_transductive_{s}.txt')}"
        for s in ("train", "valid", "test")
    )
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE parsed AS
        SELECT split, f[1] AS h, f[2] AS r, f[3] AS t,
               len(f) = 3 AND regexp_full_match(f[1], '{ENTITY}') AND regexp_full_match(f[2], '{RELATION}')
               AND regexp_full_match(f[3], '{ENTITY}') AS ok
        FROM (SELECT split, string_split(line, chr(9)) AS f FROM ({splits}))""")
    counts = con.execute("SELECT split, count(*), count(*) FILTER (WHERE NOT ok) FROM parsed GROUP BY split").fetchall()
    con.execute("""
        CREATE OR REPLACE TEMP TABLE good AS
        SELECT split, CAST(h[2:] AS BIGINT) AS h, CAST(r[2:] AS BIGINT) AS r, CAST(t[2:] AS BIGINT) AS t FROM parsed WHERE ok""")
    con.execute("""
        CREATE OR REPLACE TEMP TABLE ent AS
        SELECT CAST(row_number() OVER (ORDER BY code) - 1 AS INTEGER) AS id, code FROM (SELECT h AS code FROM good UNION SELECT t FROM good)""")
    con.execute("""
        CREATE OR REPLACE TEMP TABLE rel AS
        SELECT CAST(row_number() OVER (ORDER BY code) - 1 AS INTEGER) AS id, code FROM (SELECT DISTINCT r AS code FROM good)""")
    for table, prefix, file in (("ent", "Q", "wikidata5m_entity.txt"), ("rel", "P", "wikidata5m_relation.txt")):
        con.execute(f"""
            COPY (
              WITH labels AS (
                SELECT CAST(split_part(line, chr(9), 1)[2:] AS BIGINT) AS code, min(trim(split_part(line, chr(9), 2))) AS label
                FROM {_lines(f"{d}/{file}")}
                WHERE regexp_full_match(split_part(line, chr(9), 1), '{ENTITY if prefix == "Q" else RELATION}')
                GROUP BY ALL)
              SELECT id, '{prefix}' || {table}.code AS key, label FROM {table} LEFT JOIN labels USING (code))
            TO '{out}/{"entities" if table == "ent" else "relations"}.parquet' (FORMAT parquet)""")
    con.execute(f"""
        COPY (SELECT DISTINCT eh.id AS h, rl.id AS r, et.id AS t, split
              FROM good JOIN ent eh ON good.h = eh.code JOIN rel rl ON good.r = rl.code JOIN ent et ON good.t = et.code)
        TO '{out}/triples' (FORMAT parquet, PARTITION_BY (split), OVERWRITE_OR_IGNORE)""")
    kept = con.execute(f"SELECT count(*) FROM read_parquet('{out}/triples/*/*.parquet')").fetchone()[0]
    seconds = time.perf_counter() - start
    con.execute("DROP TABLE parsed; DROP TABLE good; DROP TABLE ent; DROP TABLE rel")
    return {"seconds": seconds, "lines": {s: n for s, n, _ in counts}, "bad": sum(b for *_, b in counts), "kept": kept}


def stats(con: duckdb.DuckDBPyConnection, ingested: str, out: str) -> dict:
    Path(out).mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE er AS
        SELECT entity, relation, sum(o) AS out_degree, sum(i) AS in_degree, sum(l) AS self_loops FROM (
          SELECT h AS entity, r AS relation, 1 AS o, 0 AS i, CAST(h = t AS INTEGER) AS l FROM read_parquet('{ingested}/triples/split=train/*.parquet')
          UNION ALL
          SELECT t, r, 0, 1, 0 FROM read_parquet('{ingested}/triples/split=train/*.parquet'))
        GROUP BY ALL""")
    con.execute(f"""
        COPY (SELECT entity, relation, out_degree, in_degree, out_degree + in_degree - self_loops AS relation_degree,
                     sum(out_degree + in_degree) OVER (PARTITION BY entity) AS entity_degree,
                     (out_degree + in_degree - self_loops) / sum(out_degree + in_degree) OVER (PARTITION BY entity) AS delta_rel_given_entity
              FROM er) TO '{out}/entity_relation_popularity.parquet' (FORMAT parquet)""")
    con.execute("""
        CREATE OR REPLACE TEMP TABLE ent AS
        SELECT entity, sum(out_degree + in_degree) AS degree, sum(in_degree) AS in_degree, sum(out_degree) AS out_degree,
               sum(self_loops) AS self_loops FROM er GROUP BY entity""")
    con.execute(f"""
        COPY (SELECT *, degree / (2 * (SELECT sum(out_degree) FROM ent)) AS delta FROM ent)
        TO '{out}/entity_popularity.parquet' (FORMAT parquet)""")
    con.execute(f"""
        COPY (SELECT relation, sum(out_degree) AS facts, count(*) FILTER (WHERE out_degree > 0) AS distinct_subjects,
                     count(*) FILTER (WHERE in_degree > 0) AS distinct_objects,
                     count(*) FILTER (WHERE out_degree > 0) / sum(out_degree) AS functionality,
                     count(*) FILTER (WHERE in_degree > 0) / sum(out_degree) AS inverse_functionality
              FROM er GROUP BY relation) TO '{out}/relation_statistics.parquet' (FORMAT parquet)""")
    con.execute(
        f"COPY (SELECT degree, count(*) AS entities FROM ent GROUP BY degree) TO '{out}/degree_histogram.parquet' (FORMAT parquet)"
    )
    pairs = con.execute("SELECT count(*) FROM er").fetchone()[0]
    seconds = time.perf_counter() - start
    con.execute("DROP TABLE er; DROP TABLE ent")
    return {"seconds": seconds, "entity_relation_pairs": pairs}
