# kgbrink: `make run` and `make test` set everything up (idempotent, fast when done) and run.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
JARS := .cache/jars
M2 := .cache/m2
S3A_JAR := $(JARS)/s3/kgbrink-s3a.jar
# Maven: the one on PATH, else Apache Maven fetched once from Maven Central into .cache/maven (checksum pinned).
MAVEN_VERSION := 3.9.11
MAVEN_SHA512 := bcfe4fe305c962ace56ac7b5fc7a08b87d5abd8b7e89027ab251069faebee516b0ded8961445d6d91ec1985dfe30f8153268843c89aa392733d1a3ec956c9978
MAVEN_HOME := .cache/maven/apache-maven-$(MAVEN_VERSION)
MVN_BIN ?= $(or $(shell command -v mvn 2>/dev/null),$(MAVEN_HOME)/bin/mvn)
MVN := $(MVN_BIN) -B -q -Dmaven.repo.local=$(abspath $(M2)) -f infra/jvm/pom.xml
# Extra jar profiles for `make jars`, e.g. JAR_PROFILES=s3 for conf/cluster*.yaml (hadoop-aws + 13 MB of AWS SDK);
# each goes to .cache/jars/<profile>/ without the jars .cache/jars/core/ already has.
JAR_PROFILES ?=
# Python packages are installed by uv (pinned; each virtualenv's pip installs it), from the same locks as pip
# would: several times faster than pip on a clean clone (BENCHMARKS.md, "The test suite and CI").
UV_VERSION := 0.13.9
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(BIN)/python)

.PHONY: setup venv jars run lint format test test-fast cluster-venv cluster-lock cluster-up cluster-down cluster-status test-cluster airflow-venv airflow-lock test-k8s test-airflow bench bench-score bench-score-duplicates bench-score-1e9 bench-rank bench-rank-1e9 bench-mine bench-build bench-actions bench-chain bench-s3a bench-okgqa bench-release rule-fixtures reproduce-probe lock clean-data clean

setup: venv jars

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q uv==$(UV_VERSION)
	$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -c requirements.lock -e '.[dev]'
	touch $@

$(MAVEN_HOME)/bin/mvn:
	mkdir -p .cache/maven
	$(PYTHON) -c 'import hashlib, sys, urllib.request; data = urllib.request.urlopen(sys.argv[1]).read(); \
	  assert hashlib.sha512(data).hexdigest() == sys.argv[2], "checksum mismatch: " + sys.argv[1]; open(sys.argv[3], "wb").write(data)' \
	  https://repo1.maven.org/maven2/org/apache/maven/apache-maven/$(MAVEN_VERSION)/apache-maven-$(MAVEN_VERSION)-bin.tar.gz \
	  $(MAVEN_SHA512) .cache/maven/maven.tar.gz
	tar -xzf .cache/maven/maven.tar.gz -C .cache/maven && rm .cache/maven/maven.tar.gz
	touch $@

# Delta is required; GraphFrames is resolved when the repository has it (see docs/configuration.md, "GraphFrames").
jars: $(JARS)/core/.resolved $(foreach p,$(JAR_PROFILES),$(JARS)/$(p)/.resolved) $(if $(filter s3,$(JAR_PROFILES)),$(S3A_JAR))
$(JARS)/core/.resolved: infra/jvm/pom.xml | $(MVN_BIN)
	rm -rf $(JARS)/core && mkdir -p $(JARS)/core
	$(MVN) dependency:copy-dependencies -DoutputDirectory=$(abspath $(JARS)/core)
	touch $@
	rm -rf $(JARS)/graphframes
	$(MAKE) --no-print-directory $(JARS)/graphframes/.resolved \
	  || echo "WARNING: GraphFrames jars could not be resolved from the Maven repository; GraphFrames is unavailable (docs/configuration.md, 'GraphFrames')." >&2

# A profile's jars minus those core already has (the pom's exclusions apply to every profile alike).
$(JARS)/%/.resolved: $(JARS)/core/.resolved | $(MVN_BIN)
	rm -rf $(JARS)/$*.tmp && $(MVN) -P$* dependency:copy-dependencies -DoutputDirectory=$(abspath $(JARS)/$*.tmp)
	for jar in $(JARS)/$*.tmp/*.jar; do if [ -e $(JARS)/core/$$(basename $$jar) ]; then rm $$jar; fi; done
	rm -rf $(JARS)/$* && mv $(JARS)/$*.tmp $(JARS)/$* && touch $@

# S3A with HDFS's rename semantics for Spark's reliable checkpoints on object storage (the class's comment):
# compiled against the s3 profile's hadoop-aws and PySpark's Hadoop client, into the s3 profile's folder.
$(S3A_JAR): infra/jvm/s3a/org/kgbrink/hadoop/RenameSafeS3AFileSystem.java $(JARS)/s3/.resolved $(VENV)/.installed
	rm -rf $(JARS)/s3a-classes && mkdir -p $(JARS)/s3a-classes
	javac --release 17 -nowarn -d $(JARS)/s3a-classes \
	  -cp "$(JARS)/s3/*:$$($(BIN)/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')/jars/*" $<
	jar cf $@ -C $(JARS)/s3a-classes . && rm -rf $(JARS)/s3a-classes

run: setup
	$(BIN)/kgbrink run --conf conf/local.yaml --json data/run-summary.json

# The local cluster stack (docs/cluster.md): a Spark standalone master and 2 workers, moto's S3 server and an
# MLflow server, all on 127.0.0.1; state, logs and PID files under data/cluster/. The servers come from their
# own virtualenv (pins in infra/cluster/requirements.txt, closure in infra/cluster/requirements.lock).
# A tool's own virtualenv: $(call tool_venv,<name>,<infra dir>) gives <name>-venv (.cache/<name>-venv from the
# dir's requirements.txt, installed with -c requirements.lock) and <name>-lock (the lock rewritten by pip freeze).
define tool_venv
$(1)-venv: .cache/$(1)-venv/.installed
.cache/$(1)-venv/.installed: $(2)/requirements.txt $(2)/requirements.lock
	test -x .cache/$(1)-venv/bin/python || $$(PYTHON) -m venv .cache/$(1)-venv
	.cache/$(1)-venv/bin/pip install -q uv==$$(UV_VERSION)
	.cache/$(1)-venv/bin/uv pip install -q --compile-bytecode --python .cache/$(1)-venv/bin/python -c $(2)/requirements.lock -r $(2)/requirements.txt
	touch $$@

$(1)-lock:
	(echo "# pip freeze of .cache/$(1)-venv (make $(1)-lock); installed with -c by make $(1)-venv"; \
	  .cache/$(1)-venv/bin/pip freeze) > $(2)/requirements.lock
endef

$(eval $(call tool_venv,cluster,infra/cluster))

cluster-up: setup cluster-venv $(S3A_JAR)
	$(BIN)/python infra/cluster/stack.py up

# Stops what the PID files under data/cluster/pids name (standard library only: works without the venv).
cluster-down:
	$(PYTHON) infra/cluster/stack.py down

cluster-status:
	$(PYTHON) infra/cluster/stack.py status

# Stack up; the make-run sample staged with boto3; ingest -> stats by spark-submit on the cluster (Delta on
# s3a, tracking on the MLflow server) compared with local mode; stack down, also on failure.
test-cluster: setup cluster-venv $(S3A_JAR)
	bash infra/cluster/test-cluster.sh

# The scheduler definitions (docs/scheduling.md): the Airflow DAG in infra/airflow/ and the Kubernetes manifests in
# infra/k8s/, tested in their own virtualenv (Airflow stays out of the project's dependencies; pins in
# infra/airflow/requirements.txt, the full closure in infra/airflow/requirements.lock).
AIRFLOW_VENV := .cache/airflow-venv
$(eval $(call tool_venv,airflow,infra/airflow))

# The manifests against the Kubernetes OpenAPI schemas (kubernetes-validate, strict), their references to each
# other, the spark-submit line, no literal credential; then the DAG loaded by Airflow's DagBag, its tasks,
# chain, retries, schedule, rendered commands and the short-circuit on a no-op refresh. Neither needs the main venv.
test-k8s: airflow-venv
	$(AIRFLOW_VENV)/bin/python -m pytest -q -p no:cacheprovider --confcutdir=tests/k8s tests/k8s

test-airflow: test-k8s
	$(AIRFLOW_VENV)/bin/python -m pytest -q -p no:cacheprovider --confcutdir=tests/airflow tests/airflow

# ruff: lint and format check (CI runs it before the tests); `make format` rewrites.
lint: venv
	$(BIN)/ruff check lib tests benchmarks jobs infra .ci
	$(BIN)/ruff format --check lib tests benchmarks jobs infra .ci

format: venv
	$(BIN)/ruff check --fix lib tests benchmarks jobs infra .ci
	$(BIN)/ruff format lib tests benchmarks jobs infra .ci

# tests/cluster needs the stack (make test-cluster); tests/airflow and tests/k8s the Airflow venv (make test-airflow).
# The suite in PYTEST_WORKERS processes (pytest-xdist, whole files per process; 1: one process).
PYTEST_WORKERS ?= 2
test: setup
	$(BIN)/python -m pytest -q --durations=40 $(if $(filter-out 1,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder) --ignore=tests/cluster --ignore=tests/airflow --ignore=tests/k8s tests

# The inner loop (about 3 minutes): the tests without a Spark session and one Spark path per package
# (tests/conftest.py, FAST_SPARK); CI runs all of them.
test-fast: setup
	$(BIN)/python -m pytest -q -m "fast and not reference" --durations=10 --ignore=tests/cluster --ignore=tests/airflow --ignore=tests/k8s tests

bench: setup
	$(BIN)/python benchmarks/bench_ingest_stats.py --sizes 2000000 20000000

# Scoring (PROBE grid + classic metrics) and filtered ranking, each beside DuckDB (and numpy) in the same run.
bench-score: setup
	$(BIN)/python benchmarks/bench_score.py --set spark.master=local[2] --set spark.conf.spark.driver.memory=8g

# The duplicate-query check of score, on and off, beside DuckDB (needs make run's sample dataset).
bench-score-duplicates: setup
	$(BIN)/python benchmarks/bench_score_duplicates.py

# 1e9 rank rows (12.8 GB of Parquet under benchmarks/out/score): the grid in one batch and the one cell, no break-down runs.
bench-score-1e9: setup
	$(BIN)/python benchmarks/bench_score.py --rows 1000000000 --skip-batched --no-diagnostics

bench-rank: setup
	$(BIN)/python benchmarks/bench_rank.py --rows 100000000

# 1e9 candidate scores (5.9 GB generated, deleted afterwards), duplicate check on; ~30 minutes.
bench-rank-1e9: setup
	$(BIN)/python benchmarks/bench_rank.py --rows 1000000000 --skip-unchecked --results benchmarks/results/rank-1e9.json

# Rule mining (max_atoms 3, BRINK thresholds) on the 20M-triple generated KG, beside DuckDB running the same plan.
bench-mine: setup
	$(BIN)/python benchmarks/bench_mine.py

# kgbrink build on BRINK Family and the make-run sample, beside a DuckDB peer of removal and answers.
# OKGQA-P: question subgraphs (networkx peer) and the kg-scope perturbation sweep (DuckDB peer), 2M triples.
bench-okgqa: setup
	$(BIN)/python benchmarks/bench_okgqa.py --triples 2000000

bench-release: setup
	$(BIN)/python benchmarks/bench_release.py --triples 2000000

bench-build: setup
	$(BIN)/python benchmarks/bench_build.py --dataset data/datasets/sample

# Spark jobs, stages and Delta commits per command on a 40-triple KG and the make-run sample (issue 43).
bench-actions: setup
	$(BIN)/python benchmarks/bench_actions.py --label current

# The whole chain (ingest -> stats -> mine -> build) on the 20M-triple generated KG, twice with different
# partitioning, outputs compared byte for byte (about 70 minutes per run on 2 cores).
bench-chain: setup
	$(BIN)/python benchmarks/bench_chain.py --partitions 8:64m 3:16m

# Ingest of the 20M-triple dump from s3a (the local stack's S3 server) against local files; the stack is
# brought up and stopped around it (about 15 minutes).
bench-s3a: setup cluster-venv $(S3A_JAR)
	$(BIN)/python infra/cluster/stack.py up || { $(PYTHON) infra/cluster/stack.py down; exit 1; }
	set -a; . $${KGBRINK_CLUSTER_DIR:-data/cluster}/aws.env; set +a; \
	  SPARK_LOCAL_IP=127.0.0.1 AWS_EC2_METADATA_DISABLED=true $(BIN)/python benchmarks/bench_s3a_ingest.py --sizes 20000000; \
	  status=$$?; $(PYTHON) infra/cluster/stack.py down; exit $$status

# Mine BRINK Family and the PROBE datasets (max_atoms 3 and 4): regression fixtures in tests/fixtures/rules/.
rule-fixtures: setup
	$(BIN)/python benchmarks/mine_reference.py --max-atoms 3 4

# Score the PROBE release's rank dumps and compare with the paper's Tables 4 and 5 (240 cells).
REFERENCE ?= ../shared/reference
reproduce-probe: setup
	$(BIN)/kgbrink reproduce-probe --conf conf/local.yaml --reference $(REFERENCE) --json data/reproduce-probe/summary.json

# Regenerate requirements.lock from the current venv (after changing pins in pyproject.toml).
lock:
	$(BIN)/pip freeze --exclude-editable | grep -v '^-e' > requirements.lock

clean-data:
	rm -rf data

clean: clean-data
	rm -rf $(VENV) .cache
