"""Paper 002 (SynthKGQA / GTSQA), the KG side (spec ``graph-seeds-002-004.md``, Sec. 2): seed subgraphs
(Algorithm 1), answer-subgraph validation and isomorphism types, question-specific graphs and shortest
paths against ground-truth paths. The LLM steps that write questions are outside kgbrink.
"""
