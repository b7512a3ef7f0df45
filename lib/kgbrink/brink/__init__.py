"""Incomplete-KG variants of BRINK (paper 000): constraint-respecting removal and its verification, questions
on the removed triples, QA metrics, the build report and the data card."""
