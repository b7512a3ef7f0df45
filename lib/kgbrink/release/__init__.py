"""One release of the five benchmarks in the form the community loads (issue 47).

``layout``: the benchmarks, their configurations and what makes one change (input versions and settings);
``card``: the Hugging Face dataset card (``README.md`` with the YAML of configs, splits and files);
``croissant``: ``croissant.json`` (Croissant 1.0: files with SHA-256, record sets with typed fields).
"""
