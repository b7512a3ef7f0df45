"""spark-submit entry point for `kgbrink score` (same arguments as the CLI subcommand).

spark-submit jobs/score.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["score", *sys.argv[1:]]))
