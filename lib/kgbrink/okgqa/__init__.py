"""OKGQA-P (paper 004, spec Sec. 4): PPR-pruned question subgraphs, KG perturbations RS/RR/ER/ED, and
the KG similarity metrics ATS, SC2D and SD2, per question subgraph or for the whole KG."""
