"""spark-submit entry point for `kgbrink score-mcq` (same arguments as the CLI subcommand).

spark-submit jobs/score_mcq.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["score-mcq", *sys.argv[1:]]))
