"""spark-submit entry point for `kgbrink stats` (same arguments as the CLI subcommand).

spark-submit jobs/stats.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["stats", *sys.argv[1:]]))
