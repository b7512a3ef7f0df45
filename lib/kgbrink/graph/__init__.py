"""Graph algorithms on Spark DataFrames, for papers 002 and 004 (spec ``graph-seeds-002-004.md``, Sec. 1
and 5), with one column vocabulary, GraphFrames' (pandas frames too): a vertex is ``id`` (a per-question
vertex set ``qid, id``); a directed step or edge is ``src, dst``, with the relation ``r`` when labelled; the
KG's triples stay ``h, r, t``; a shortest-path query is ``pair_id, s, a`` (seed and answer, paper 002's
notation).

GraphFrames' JVM package is not served by the Maven repository these machines reach and GraphX is
deprecated since Spark 4.0, so the algorithms are kgbrink's own: distributed ones as joins and
aggregations (``views``, ``hashing``, ``khop``, ``pagerank``, ``paths``, ``metapaths``, ``components``,
``triangles``), per-question ones on one extracted subgraph with scipy (``local``, ``local_paths``,
``local_metapaths``), run through ``applyInPandas``.
``graphframes_compat`` uses GraphFrames instead where its jar is on the classpath.
"""
