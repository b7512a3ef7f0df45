"""spark-submit entry point for `kgbrink perturb` (same arguments as the CLI subcommand).

spark-submit jobs/perturb.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["perturb", *sys.argv[1:]]))
