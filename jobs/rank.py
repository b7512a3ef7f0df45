"""spark-submit entry point for `kgbrink rank` (same arguments as the CLI subcommand).

spark-submit jobs/rank.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["rank", *sys.argv[1:]]))
