"""Checks shared by tests/airflow and tests/k8s (the scheduler definitions), which run in the Airflow venv
(make test-airflow) without kgbrink or Spark: the options each job takes, as docs/jobs.md lists them (that
page's option tables are generated from the job registry and kept current by tests/test_docs.py), and a scan
for literal credentials."""

from __future__ import annotations

import json
import re
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# Every subcommand's options (docs/jobs.md, "Common options, output and exit status").
COMMON_OPTIONS = {"--conf", "--set", "--json", "--no-tracking"}


def job_options(job: str) -> set[str]:
    """The options of ``kgbrink <job>``: its table in docs/jobs.md plus the common ones."""
    text = (PROJECT_ROOT / "docs/jobs.md").read_text()
    section = text.split(f"## `kgbrink {job}`\n", 1)[1].split("\n## ", 1)[0]
    return COMMON_OPTIONS | set(re.findall(r"^\| `(--[a-z][a-z0-9-]*)", section, re.MULTILINE))


def options_given(argv: list[str]) -> list[str]:
    """The ``--flag`` words of a job's arguments (``--flag=value`` as ``--flag``)."""
    return [word.split("=", 1)[0] for word in argv if word.startswith("--")]


# What a literal credential looks like: AWS key ids and secrets, private keys, Spark/Hadoop or MLflow
# credential settings with a value, "password:"/"token:" keys with a literal value.
SECRET_PATTERNS = {
    "AWS access key id": re.compile(r"\b(AKIA|ASIA)[A-Z0-9]{16}\b"),
    "40-character AWS secret": re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"),
    "private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    "S3A key setting": re.compile(r"fs\.s3a\.(access|secret|session)\.key", re.IGNORECASE),
    "credential variable with a value": re.compile(
        r"(?<!secretKeyRef\.)\b(AWS_SECRET_ACCESS_KEY|AWS_ACCESS_KEY_ID|AWS_SESSION_TOKEN|MLFLOW_TRACKING_(PASSWORD|TOKEN))\s*[=:]\s*['\"]?[A-Za-z0-9/+]"
    ),
    "password or token key": re.compile(
        r"^[ \t-]*[\w.-]*(password|passwd|token|secret)(?!keyref|name\b|ref\b)[\w.-]*[ \t]*:[ \t]*[^\s|>]", re.I | re.M
    ),
}


def literal_secrets(text: str) -> list[str]:
    """The kinds of literal credential ``text`` holds (empty: none)."""
    return [name for name, pattern in SECRET_PATTERNS.items() if pattern.search(text)]


# A stand-in for .venv/bin/spark-submit and .venv/bin/kgbrink: records its arguments (and JARS) and writes the
# job's summary where --json says (status ok; a refresh: no change, or a change with KGBRINK_STUB_CHANGED=1, and
# with --out a rebuilt variant's folder).
STUB = """#!{python}
import json, os, sys
args = sys.argv[1:]
with open({log!r}, "a") as log:
    log.write(json.dumps(args) + "\\n")
job = next((a[5:-3] for a in args if a.startswith("jobs/")), args[0])
summary = {{"job": job, "status": "ok", "counts": {{}}}}
if job == "refresh":
    changed = os.environ.get("KGBRINK_STUB_CHANGED") == "1"
    action = "stale" if changed else "skip"
    summary.update(changed=changed, downstream=[{{"kind": "variant", "name": "brink", "action": action}}])
    if "--out" in args:
        os.makedirs(os.path.join(args[args.index("--out") + 1], "brink"), exist_ok=True)
json.dump(summary, open(args[args.index("--json") + 1], "w"), indent=2)
print("human summary on stdout")
"""


def stub_project(root: Path, python: str) -> Path:
    """A checkout whose .venv/bin has stub spark-submit and kgbrink (calls logged to ``calls.jsonl``), the real
    python, and the jars of two of the three folders ``JARS=$(ls ...)`` lists (no GraphFrames, as here)."""
    bin_dir = root / ".venv/bin"
    bin_dir.mkdir(parents=True)
    for name in ("spark-submit", "kgbrink"):
        (bin_dir / name).write_text(STUB.format(python=python, log=str(root / "calls.jsonl")))
        (bin_dir / name).chmod(0o755)
    (bin_dir / "python").symlink_to(python)
    for jar in ("core/delta-spark.jar", "s3/hadoop-aws.jar"):
        (root / ".cache/jars" / jar).parent.mkdir(parents=True, exist_ok=True)
        (root / ".cache/jars" / jar).touch()
    return root


def stub_calls(root: Path) -> list[list[str]]:
    """The argument lists the stubs of ``stub_project`` were called with, in order."""
    return [json.loads(line) for line in (root / "calls.jsonl").read_text().splitlines()]
