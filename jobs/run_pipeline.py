"""spark-submit entry point for `kgbrink run` (same arguments as the CLI subcommand).

spark-submit jobs/run_pipeline.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
