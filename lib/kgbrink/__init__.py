"""kgbrink: incomplete-KG benchmark construction (BRINK) and popularity-aware rank scoring (PROBE) on Spark."""

__version__ = "0.1.0"
