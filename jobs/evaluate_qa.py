"""spark-submit entry point for `kgbrink evaluate-qa` (same arguments as the CLI subcommand).

spark-submit jobs/evaluate_qa.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["evaluate-qa", *sys.argv[1:]]))
