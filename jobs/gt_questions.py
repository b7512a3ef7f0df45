"""spark-submit entry point for `kgbrink gt-questions` (same arguments as the CLI subcommand).

spark-submit jobs/gt_questions.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["gt-questions", *sys.argv[1:]]))
