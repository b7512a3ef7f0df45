"""spark-submit entry point for `kgbrink mcq` (same arguments as the CLI subcommand).

spark-submit jobs/mcq.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["mcq", *sys.argv[1:]]))
