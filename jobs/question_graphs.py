"""spark-submit entry point for `kgbrink question-graphs` (same arguments as the CLI subcommand).

spark-submit jobs/question_graphs.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["question-graphs", *sys.argv[1:]]))
