"""spark-submit entry point for `kgbrink export-rules` (same arguments as the CLI subcommand).

spark-submit jobs/export_rules.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["export-rules", *sys.argv[1:]]))
