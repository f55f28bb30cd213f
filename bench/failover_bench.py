"""Failover of the operator's leadership, measured several times: after SIGKILL of the
leader, after SIGTERM of the leader, and under a partition of the leader's Lease traffic
(its renewals held, the process alive).

Each trial is one run of tests/integration/test_operator_partition.py, whose two tests run
two `infergate operator` replicas as local processes, each behind its own fault proxy, so
every request each one makes is timed on the test's clock. The tests print their figures
(`failover figures: ...`) and assert no timing beyond a generous bound; this script runs
the file `--runs` times in one pytest session (one cluster, one operator install),
collects the figures and prints, per figure, every trial, the median and the maximum.

- after SIGKILL: from the kill to the follower holding the Lease, and to its first write
  (a scale of the deployment applied at the kill);
- after SIGTERM: the same from the SIGTERM (the leader releases the Lease as it stops);
- partition: from the cut to the old leader's last write landing (answered by the API
  server), to the follower holding the Lease, and to the new leader's first write; the gap
  is the new leader's first write minus the old one's last (positive: they never wrote
  at the same time).

    flock /tmp/cluster.lock .venv/bin/python bench/failover_bench.py --runs 3

Figures and the command are recorded in experiments/SECURITY.md ("Failover time of the HA
pair").
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEST = "tests/integration/test_operator_partition.py"
_NUMBER = r"(-?[0-9.]+)s"
PATTERNS = {
    "partition": re.compile(
        rf"partition of the Lease: old leader's last write landed {_NUMBER} after the cut "
        rf"\([0-9]+ writes meanwhile\), the Lease taken {_NUMBER} after it, the new "
        rf"leader's first write {_NUMBER} after it \(gap {_NUMBER}\)"
    ),
    "signals": re.compile(
        rf"after SIGKILL: Lease held by the follower {_NUMBER} later, first write {_NUMBER} "
        rf"\(Lease [0-9]+s\); after SIGTERM: {_NUMBER}, first write {_NUMBER}"
    ),
}
FIGURES = {
    "partition": (
        "partition: old leader's last write landed (s after the cut)",
        "partition: follower holds the Lease (s after the cut)",
        "partition: new leader's first write (s after the cut)",
        "partition: gap, new leader's first write - old leader's last (s)",
    ),
    "signals": (
        "SIGKILL: follower holds the Lease (s)",
        "SIGKILL: new leader's first write (s)",
        "SIGTERM: follower holds the Lease (s)",
        "SIGTERM: new leader's first write (s)",
    ),
}


def parse(output: str) -> dict[str, list[float]]:
    """Every trial's figures, by name, from the tests' printed lines."""
    found: dict[str, list[float]] = {name: [] for names in FIGURES.values() for name in names}
    for kind, pattern in PATTERNS.items():
        for match in pattern.finditer(output):
            numbers = [float(g) for g in match.groups()]
            for name, value in zip(FIGURES[kind], numbers, strict=True):
                found[name].append(value)
    return found


def summary(found: dict[str, list[float]]) -> dict[str, dict[str, object]]:
    return {
        name: {
            "trials": values,
            "median": round(statistics.median(values), 1) if values else None,
            "max": max(values) if values else None,
        }
        for name, values in found.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="trials of each case")
    parser.add_argument(
        "--out", type=Path, default=None, help="also write the figures here as JSON"
    )
    args = parser.parse_args()
    argv = [
        sys.executable, "-m", "pytest", "--keep-duplicates", *[TEST] * args.runs,
        "-s", "-p", "no:cacheprovider", "-p", "no:randomly", "-rA",
    ]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    took = time.monotonic() - started
    output = done.stdout + done.stderr
    results = summary(parse(output))
    tail = [line for line in output.splitlines() if re.match(r"^=+ .*(passed|failed)", line)]
    print(f"{args.runs} runs of {TEST} in {took:.0f}s: {tail[-1] if tail else 'no summary'}")  # noqa: T201
    for name, figure in results.items():
        trials = ", ".join(f"{v:.1f}" for v in figure["trials"])  # type: ignore[attr-defined]
        print(f"  {name}: median {figure['median']}, max {figure['max']} ({trials})")  # noqa: T201
    if args.out is not None:
        args.out.write_text(
            json.dumps({"runs": args.runs, "seconds": round(took), "figures": results}, indent=2)
            + "\n"
        )
    if done.returncode != 0:
        print(output[-6000:])  # noqa: T201
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
