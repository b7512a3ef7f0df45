"""spark-submit entry point for `kgbrink okgqa-sweep` (same arguments as the CLI subcommand).

spark-submit jobs/okgqa_sweep.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["okgqa-sweep", *sys.argv[1:]]))
