"""spark-submit entry point for `kgbrink build` (same arguments as the CLI subcommand).

spark-submit jobs/build.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["build", *sys.argv[1:]]))
