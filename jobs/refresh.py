"""spark-submit entry point for `kgbrink refresh` (same arguments as the CLI subcommand).

spark-submit jobs/refresh.py --conf conf/cluster.yaml --dataset s3a://bucket/datasets/wd5m --format wikidata5m \
    --input s3a://bucket/dumps/wikidata5m/ --json refresh.json
"""

import sys

from kgbrink.cli import main

if __name__ == "__main__":
    sys.exit(main(["refresh", *sys.argv[1:]]))
