"""Sizing a cluster from Spark's event log: the recorded tasks read back (:mod:`.eventlog`) and replayed on
N cores (:mod:`.replay`)."""
