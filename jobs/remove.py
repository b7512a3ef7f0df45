"""spark-submit entry point for `kgbrink remove` (same arguments as the CLI subcommand).

spark-submit jobs/remove.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["remove", *sys.argv[1:]]))
