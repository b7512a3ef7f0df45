"""spark-submit entry point for `kgbrink stage` (same arguments as the CLI subcommand; no Spark session).

python jobs/stage.py --conf conf/cluster-local.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["stage", *sys.argv[1:]]))
