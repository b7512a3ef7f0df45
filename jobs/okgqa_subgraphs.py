"""spark-submit entry point for `kgbrink okgqa-subgraphs` (same arguments as the CLI subcommand).

spark-submit jobs/okgqa_subgraphs.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["okgqa-subgraphs", *sys.argv[1:]]))
