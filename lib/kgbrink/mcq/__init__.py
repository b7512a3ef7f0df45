"""ProbeKGC multiple-choice KG completion probes (paper 003, spec Sec. 3): question construction
(:mod:`kgbrink.mcq.options`), rendering (:mod:`kgbrink.mcq.render`) and scoring."""
