"""spark-submit entry point for `kgbrink ground` (same arguments as the CLI subcommand).

spark-submit jobs/ground.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["ground", *sys.argv[1:]]))
