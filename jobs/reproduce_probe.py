"""spark-submit entry point for `kgbrink reproduce-probe` (same arguments as the CLI subcommand).

spark-submit jobs/reproduce_probe.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["reproduce-probe", *sys.argv[1:]]))
