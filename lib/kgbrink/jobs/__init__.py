"""Job functions: read inputs, call the pure transformations, write Delta tables, return a JobSummary.

The CLI (kgbrink.cli) and the spark-submit entry points in ``jobs/`` both call these.
"""
