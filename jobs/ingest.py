"""spark-submit entry point for `kgbrink ingest` (same arguments as the CLI subcommand).

spark-submit jobs/ingest.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["ingest", *sys.argv[1:]]))
