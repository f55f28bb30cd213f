"""The gate bench's undecided benign row, judged on more prompts, measured on the fixture.

experiments/BENCH_UNDECIDED.md: `transformers-bf16-vs-fp32` (transformers fp32 -> bf16,
profile dtype-change) is Inconclusive at the bench's 64 short + 4 long prompts, and a
simulation there estimated how often more short prompts would decide it. This records the
row's two sides (`tf32`, `tf-bf16@tf32`) on an extended suite, the way the bench records
transformers sides (`gate_bench.record_all`: its worker in the engine venv), and judges the
row the way the bench does (`gate_bench.judge`: `infergate parity compare --profile
dtype-change`) on prefix slices of 64, 128, 192 and 256 short prompts, each with the 4
long ones, under static limits and under the limits of the bench's kept noise record for
`tf32` (`--noise`, `gate_bench.calibration_for`).

The extended suite: the bench suite's 64 short prompts first, in order, then beginnings
of further held-out grammar sentences cut as the bench cuts them (`_opening`), English and
Chinese alternating, no text twice and none that is (or is a prefix of, or starts with) a
short prompt of the bench's calibration suite, whose noise sets the calibrated limits;
then the bench's 4 long prompts. Nothing of the bench (suite, sides, profile, limits) is
changed.

    flock /tmp/heavy.lock .venv/bin/python experiments/bench_more_prompts.py --record-only
    .venv/bin/python experiments/bench_more_prompts.py        # judges; prints the table

(PYTHONPATH=operator:dev, as every script here.) Records, prefixes and verdicts go to
out/bench-more-prompts; a record already finished is reused.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import gate_bench as gb

from infergate.fixture.corpus import generated_sentences, held_out_sentences
from infergate.fixture.generate import FixtureSpec
from infergate.suite import PromptSpec, Suite

ROW = "transformers-bf16-vs-fp32"
SLICES = (64, 128, 192, 256)
HELD_OUT_DRAW = 2000
"""Held-out grammar sentences drawn (`held_out_sentences` keeps its order for any count, so
the bench's 200 are the first 200 of these): enough for 256 short prompts."""
SUITE_FILE = "gate-bench-more.jsonl"
WATCHED = ("minSameTopRate", "maxMeanKl", "maxDecodeSelfDelta")
"""The three checks BENCH_UNDECIDED.md finds undecided at 64 prompts: always shown."""


def extended_suite(short: int = SLICES[-1]) -> Suite:
    """The bench suite's 64 short prompts, then held-out grammar openings up to `short`
    short prompts, English and Chinese alternating, then the bench's 4 long prompts."""
    bench = gb.bench_suite()
    prompts = list(bench.select(long=False).prompts)
    texts = {p.text for p in prompts}
    ids = {p.id for p in prompts}
    # Nor a prompt of the calibration suite, or a prefix of one, either way (the clash test
    # `calibration_suite` holds itself to): the calibrated limits come from that suite.
    calibration = [p.text for p in gb.calibration_suite().select(long=False).prompts if p.text]
    training = generated_sentences(FixtureSpec().generated_sentences, FixtureSpec().seed)
    queues: dict[str, list[PromptSpec]] = {"en": [], "zh": []}
    for index, sentence in enumerate(held_out_sentences(HELD_OUT_DRAW, training)):
        language = gb._language(sentence)
        text = gb._opening(sentence)
        pid = f"{language}-grammar-{index}"
        if text in texts or pid in ids or any(text in c or c in text for c in calibration):
            continue
        texts.add(text)
        queues[language].append(PromptSpec(id=pid, text=text, tags=(language, "short")))
    # The bench's last short prompt is English: Chinese next.
    turn = "zh" if gb._language(prompts[-1].text or "a") == "en" else "en"
    while len(prompts) < short:
        if not queues[turn]:
            raise RuntimeError(
                f"extended suite: held-out {turn} openings run out at {len(prompts)}"
            )
        prompts.append(queues[turn].pop(0))
        turn = "en" if turn == "zh" else "zh"
    return Suite("gate-bench-more", (*prompts, *bench.select(long=True).prompts))


def bound(check: dict[str, Any]) -> float | None:
    """The side of a check's interval its limit is tested on."""
    op = check.get("op")
    if op == ">=":
        return check.get("lower")
    if op == "<=":
        return check.get("upper")
    low, high = check.get("lower"), check.get("upper")  # |<=|: the larger magnitude
    return None if low is None or high is None else max(abs(low), abs(high))


def summary(out: Path, rung: int, noise: Path | None) -> dict[str, Any]:
    """One slice's verdict (`gate_bench.judge`) and the checks worth showing."""
    candidate = next(c for c in gb.CANDIDATES if c.name == ROW)
    judged = gb.judge(candidate, out, rung, tokens=gb.TOKENS[candidate.baseline], noise=noise)
    suffix = "-calibrated" if noise else ""
    path = out / "verdicts" / f"{ROW}-{gb.TOKENS[candidate.baseline]}tok-{rung}{suffix}.json"
    document = json.loads(path.read_text())
    checks = (document.get("verdict") or {}).get("checks") or []
    per_prompt = (document.get("result") or {}).get("prompts") or []
    shown = [
        {
            "key": c["key"],
            "outcome": c["outcome"],
            "value": c.get("value"),
            "bound": bound(c),
            "op": c.get("op"),
            "limit": c.get("threshold"),
        }
        for c in checks
        if c["key"] in WATCHED or c.get("outcome") != "pass"
    ]
    return {
        "prompts": rung,
        "limits": "calibrated" if noise else "static",
        "status": judged["status"],
        "closest": judged["closest"],
        "checks": shown,
        "missing": [  # prompts with a flipped top token: id, positions scored, rate, mean KL
            [p["promptId"], p["klSteps"], p["sameTopRate"], p["meanKl"]]
            for p in per_prompt
            if p.get("sameTopRate") is not None and p["sameTopRate"] < 1.0
        ],
    }


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def to_markdown(rows: list[dict[str, Any]], long: int) -> str:
    lines = [
        "| prompts | limits | verdict | check | outcome | value | 95% bound | limit |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        for check in row["checks"]:
            cells = [
                f"{row['prompts']}+{long}", row["limits"], row["status"], check["key"],
                check["outcome"], _fmt(check["value"]), _fmt(check["bound"]),
                f"{check['op']} {_fmt(check['limit'])}",
            ]  # fmt: skip
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=gb.REPO / "out" / "bench-more-prompts")
    parser.add_argument("--short", type=int, default=SLICES[-1], help="short prompts in all")
    parser.add_argument(
        "--noise", type=Path, default=gb.REPO / "experiments" / "gate_bench_noise_fp32.json",
        help="the bench's kept noise record of tf32 (make gate-bench copies it here)",
    )  # fmt: skip
    parser.add_argument("--record-only", action="store_true", help="record and stop")
    args = parser.parse_args(argv)
    candidate = next(c for c in gb.CANDIDATES if c.name == ROW)
    suite = extended_suite(args.short)
    suite_path = args.out / SUITE_FILE
    gb.write_suite(suite_path, suite)
    bench_short = gb.bench_suite().select(long=False).prompts
    if suite.select(long=False).prompts[: len(bench_short)] != bench_short:
        raise RuntimeError("extended suite: does not start with the bench's short prompts")
    started = time.perf_counter()
    seconds = gb.record_all([candidate], args.out, suite_path)
    gb._log(f"recorded in {seconds:.0f} s ({time.perf_counter() - started:.0f} s)")
    if args.record_only:
        return 0
    noise, why = gb.calibration_for(candidate, {candidate.baseline: args.noise})
    if noise is None:
        raise RuntimeError(f"no calibrated limits: {why}")
    started = time.perf_counter()
    slices = [n for n in SLICES if n <= args.short]
    rows = [summary(args.out, n, limits) for n in slices for limits in (None, noise)]
    judge_seconds = time.perf_counter() - started
    long = len(suite.select(long=True).prompts)
    document = {
        "row": ROW, "suite": suite.name, "digest": suite.digest(), "short": args.short,
        "long": long, "noise": str(args.noise), "recordSeconds": round(seconds, 1),
        "judgeSeconds": round(judge_seconds, 1), "rows": rows,
    }  # fmt: skip
    (args.out / "bench_more_prompts.json").write_text(json.dumps(document, indent=1) + "\n")
    print(to_markdown(rows, long))  # noqa: T201 - the table is the script's output
    for row in rows[-1:]:
        print(f"prompts with a same-top miss at {row['prompts']}+{long}:")  # noqa: T201
        for pid, steps, rate, kl in row["missing"]:
            print(f"  {pid}: {steps} positions, same-top {rate:.4f}, mean KL {kl:.3g}")  # noqa: T201
    print(f"judged in {judge_seconds:.0f} s")  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
