"""The CI budget table: each phase of .ci/run against its target, the ten slowest test files (fixture set-up
included) and the ten slowest commands of the cluster tests. Standard library only.

Reads ``<dir>/phases.tsv`` (``phase<TAB>seconds<TAB>exit``, written by .ci/run), the JUnit XML files
``<dir>/<phase>.xml`` (pytest --junitxml) and the cluster tests' ``test-cluster-times.txt``.

    python3 .ci/budget.py .cache/ci [data/cluster/test-cluster-times.txt]
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

# Issue 69's targets, seconds: make test 12 min, make test-cluster 18, the whole run 35.
TARGETS = {"make test": 720, "make test-cluster": 1080, "total": 2100}


def phases(folder: Path) -> list[tuple[str, float, str]]:
    path = folder / "phases.tsv"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        name, seconds, status = (line.split("\t") + ["", ""])[:3]
        rows.append((name, float(seconds), status))
    return rows


def file_times(folder: Path) -> list[tuple[float, str, str, int]]:
    """``(seconds, phase, test file, tests)`` from every JUnit XML in ``folder``."""
    out = []
    for xml in sorted(folder.glob("*.xml")):
        totals: dict[str, list] = defaultdict(lambda: [0.0, 0])
        try:
            root = ElementTree.parse(xml).getroot()
        except ElementTree.ParseError:
            continue
        for case in root.iter("testcase"):
            module = case.get("classname", "").split(".")
            name = "/".join(part for part in module if not part[:1].isupper()) + ".py"
            totals[name][0] += float(case.get("time") or 0)
            totals[name][1] += 1
        out += [(seconds, xml.stem, name, n) for name, (seconds, n) in totals.items()]
    return sorted(out, reverse=True)


def cluster_commands(path: Path | None) -> list[tuple[float, str]]:
    if path is None or not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2:
            try:
                out.append((float(parts[1]), parts[0]))
            except ValueError:
                continue
    return sorted(out, reverse=True)


def main(argv: list[str]) -> int:
    folder = Path(argv[0]) if argv else Path(".cache/ci")
    cluster = Path(argv[1]) if len(argv) > 1 else None
    rows = phases(folder)
    print("\nCI budget (.ci/run)")
    print(f"  {'phase':<22} {'seconds':>8} {'target':>7}  status")
    for name, seconds, status in rows:
        target = TARGETS.get(name)
        flag = "" if target is None or seconds <= target else "  OVER"
        print(f"  {name:<22} {seconds:>8.0f} {target or '':>7}  {status or '-'}{flag}")
    total = sum(seconds for _, seconds, _ in rows)
    flag = "  OVER" if total > TARGETS["total"] else ""
    print(f"  {'total':<22} {total:>8.0f} {TARGETS['total']:>7}{flag}")
    files = file_times(folder)[:10]
    if files:
        print("\nTen slowest test files (seconds, set-up included)")
        for seconds, phase, name, n in files:
            print(f"  {seconds:>8.1f}  {name:<40} {n:>4} tests  ({phase})")
    commands = cluster_commands(cluster)[:10]
    if commands:
        print("\nTen slowest commands of the cluster tests (seconds)")
        for seconds, name in commands:
            print(f"  {seconds:>8.1f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
