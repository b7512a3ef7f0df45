"""PROBE (paper 001): rank files in every format, filtered ranking from candidate scores, the PROBE and
classic rank metrics, the paper's Tables 4 and 5, and the score plots."""
