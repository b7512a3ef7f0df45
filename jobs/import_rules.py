"""spark-submit entry point for `kgbrink import-rules` (same arguments as the CLI subcommand).

spark-submit jobs/import_rules.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["import-rules", *sys.argv[1:]]))
