"""spark-submit entry point for `kgbrink sp-analysis` (same arguments as the CLI subcommand).

spark-submit jobs/sp_analysis.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["sp-analysis", *sys.argv[1:]]))
