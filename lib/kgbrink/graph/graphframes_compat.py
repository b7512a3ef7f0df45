"""GraphFrames where its JVM package is on the classpath (spec Sec. 5.2), giving the same schemas as kgbrink's
own algorithms, for cross-checks and for clusters that have the jar.

``graphframes-py`` only wraps the JVM classes of ``io.graphframes:graphframes-spark4_2.13``, which ``make jars``
resolves (profile ``graphframes`` of ``infra/jvm/pom.xml``) only where the Maven repository serves it. The
mirror this project reaches does not (docs/configuration.md, "GraphFrames"), so :func:`graphframes_available`
is normally false and :mod:`kgbrink.graph.components` is the implementation in use.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kgbrink.core.frames import checkpoint_mode
from kgbrink.graph import views

GRAPHFRAME_CLASS = "org.graphframes.GraphFrame"
GRAPHFRAMES_ARTIFACT = "io.graphframes:graphframes-spark4_2.13"


def graphframes_available(spark: SparkSession) -> bool:
    """Whether the driver JVM can load ``org.graphframes.GraphFrame`` (the jar is on its classpath)."""
    try:
        jvm = spark.sparkContext._jvm
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(GRAPHFRAME_CLASS, False, loader)
    except Exception:
        return False
    return True


def connected_components_graphframes(
    spark: SparkSession, triples: DataFrame, vertices: DataFrame | None = None
) -> DataFrame:
    """``id, component`` as :func:`kgbrink.graph.components.connected_components`, by GraphFrames'
    ``connectedComponents(algorithm="two_phase")`` (integral ids: component = the minimum id)."""
    if not graphframes_available(spark):
        raise RuntimeError(
            f"GraphFrames is not on the driver classpath: cannot load {GRAPHFRAME_CLASS} from the jar "
            f"{GRAPHFRAMES_ARTIFACT}; `make jars` resolves it where the Maven repository serves it "
            "(docs/configuration.md, 'GraphFrames'). Use kgbrink.graph.components.connected_components instead."
        )
    from graphframes import GraphFrame

    nodes = views.vertices(triples)
    if vertices is not None:
        nodes = nodes.union(vertices.select("id")).distinct()
    result = GraphFrame(nodes, views.edges(triples)).connectedComponents(
        algorithm="two_phase", broadcastThreshold=-1, use_local_checkpoints=checkpoint_mode(spark) == "local"
    )
    id_type = nodes.schema["id"].dataType
    return result.select("id", F.col("component").cast(id_type).alias("component"))
