"""spark-submit entry point for `kgbrink kg-similarity` (same arguments as the CLI subcommand).

spark-submit jobs/kg_similarity.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["kg-similarity", *sys.argv[1:]]))
