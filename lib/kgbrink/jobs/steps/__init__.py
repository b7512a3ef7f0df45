"""Steps that several jobs share: ingest's steps (which ``refresh`` runs with merges), the options and the
variant the BRINK jobs open, and the refresh's merges and decisions. No module here registers a job; the
job modules of :mod:`kgbrink.jobs` import them, never each other."""
