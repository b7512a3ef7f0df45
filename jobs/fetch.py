"""spark-submit entry point for `kgbrink fetch` (same arguments as the CLI subcommand; no Spark session).

python jobs/fetch.py --conf conf/cluster-local.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["fetch", *sys.argv[1:]]))
