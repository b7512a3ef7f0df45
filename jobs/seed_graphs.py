"""spark-submit entry point for `kgbrink seed-graphs` (same arguments as the CLI subcommand).

spark-submit jobs/seed_graphs.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["seed-graphs", *sys.argv[1:]]))
