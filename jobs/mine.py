"""spark-submit entry point for `kgbrink mine` (same arguments as the CLI subcommand).

spark-submit jobs/mine.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["mine", *sys.argv[1:]]))
