"""spark-submit entry point for `kgbrink questions` (same arguments as the CLI subcommand).

spark-submit jobs/questions.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["questions", *sys.argv[1:]]))
