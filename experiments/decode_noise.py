"""The benign spread of the decode-path figures (`parity.decode`), from pairs of records.

    .venv/bin/python experiments/decode_noise.py --pair LABEL=BASE:CAND [--pair ...] \
        [--json out/decode-noise.json]

Each pair is compared by the parity core with every check off; for each it prints the
decode figures the thresholds `maxDecodeSelfDelta` and `maxDecodeExcess` decide on (value
and one-sided 95% bounds, each prompt weighing the same) and the baseline's own
decode-vs-prefill figure, which an A/A pair measures twice. The records come from
`infergate parity calibrate` (base, again, concurrent-N: experiments/DECODE_NOISE.md).
"""

# ruff: noqa: T201 - a script that reports to the terminal

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "operator"))

from infergate.parity.compare import compare_sources  # noqa: E402
from infergate.parity.metrics import Estimate  # noqa: E402
from infergate.parity.thresholds import Thresholds  # noqa: E402
from infergate.recordio import RecordReader  # noqa: E402


def _estimate(estimate: Estimate | None) -> dict[str, Any] | None:
    if estimate is None:
        return None
    return {"value": estimate.value, "lower": estimate.lower, "upper": estimate.upper,
            "prompts": estimate.evidence}  # fmt: skip


def measure(label: str, base: Path, cand: Path) -> dict[str, Any]:
    """One pair's decode figures."""
    result = compare_sources(
        RecordReader(base), RecordReader(cand), Thresholds(max_divergence_logprob_gap=0.1), ("*",)
    )
    decode = result.metrics.decode
    if decode is None:
        return {"label": label, "decode": None}
    return {
        "label": label,
        "prompts": decode.prompts,
        "steps": decode.steps,
        "candidateSelfMeanAbs": _estimate(decode.candidate_self_mean_abs),
        "excess": _estimate(decode.excess),
        "crossMeanAbs": _estimate(decode.cross_mean_abs),
        "crossMaxAbs": decode.cross_max_abs,
        "baselineSelfMaxAbs": decode.baseline_self_max_abs,
        "candidateSelfMaxAbs": decode.candidate_self_max_abs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pair", action="append", required=True, help="LABEL=BASE:CAND")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    for text in args.pair:
        label, _, rest = text.partition("=")
        base, _, cand = rest.partition(":")
        rows.append(measure(label, Path(base), Path(cand)))
    for row in rows:
        print(json.dumps(row))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
