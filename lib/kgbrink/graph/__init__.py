"""Graph algorithms on Spark DataFrames, in GraphFrames' vocabulary (vertices ``id``; edges ``src``, ``dst``
and the relation ``r``), for papers 002 and 004 (spec ``graph-seeds-002-004.md``, Sec. 1 and 5).

GraphFrames' JVM package is not served by the Maven repository these machines reach and GraphX is
deprecated since Spark 4.0, so the algorithms are kgbrink's own: distributed ones as joins and
aggregations (``views``, ``hashing``, ``khop``, ``pagerank``, ``paths``, ``metapaths``, ``components``,
``triangles``), per-question ones on one extracted subgraph with scipy (``local``, ``local_paths``,
``local_metapaths``), run through ``applyInPandas``.
``graphframes_compat`` uses GraphFrames instead where its jar is on the classpath.
"""
