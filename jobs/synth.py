"""spark-submit entry point for `kgbrink synth` (same arguments as the CLI subcommand).

spark-submit jobs/synth.py --conf conf/cluster.yaml ...
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["synth", *sys.argv[1:]]))
