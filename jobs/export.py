"""spark-submit entry point for `kgbrink export` (same arguments as the CLI subcommand).

spark-submit jobs/export.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["export", *sys.argv[1:]]))
