"""spark-submit entry point for `kgbrink verify` (same arguments as the CLI subcommand).

spark-submit jobs/verify.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["verify", *sys.argv[1:]]))
