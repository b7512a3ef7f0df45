#!/usr/bin/env bash
# make test-cluster: the local cluster stack up, tests/cluster against it, the stack down (also when
# anything fails or the run is interrupted). Timings go to data/cluster/test-cluster-times.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=.venv/bin/python
STATE=${KGBRINK_CLUSTER_DIR:-data/cluster}

down() {
  status=$?
  "$PY" infra/cluster/stack.py down >/dev/null || status=1
  echo "test-cluster: stack down; total $(($(date +%s) - start)) s (exit $status)" >&2
  exit "$status"
}

start=$(date +%s)
# A fresh state: no data of an earlier run (the S3 server and MLflow database start empty as well).
"$PY" infra/cluster/stack.py down >/dev/null
rm -rf "$STATE"
trap down EXIT
trap 'exit 130' INT TERM
"$PY" infra/cluster/stack.py up
up=$(($(date +%s) - start))
echo "test-cluster: stack up in ${up} s" >&2
# The credentials the stack drew (never written anywhere else); no EC2 metadata lookups.
set -a
. "$STATE/aws.env"
set +a
export AWS_EC2_METADATA_DISABLED=true SPARK_LOCAL_IP=127.0.0.1
mkdir -p "$STATE"
echo "cluster-up ${up}" >"$STATE/test-cluster-times.txt"
# A test's time limit covers its fixtures' set-up: the sample pipeline's (about 10 minutes) is the longest.
"$PY" -m pytest -q -p no:cacheprovider --durations=0 --timeout=1500 tests/cluster "$@"
