"""Benchmark of the streaming hidden-state comparison.

Feeds `--prompts` pairs of float32 [tokens, hidden] hidden states through
`HiddenStateAccumulator`, generating each pair on the fly into the same two buffers
(64 x 8K x 3584 float32 is about 7.5 GB a side, which must never sit in memory).
Reports, all measured in this run:

- prompts/s of the comparison (generation excluded);
- its bandwidth (bytes of both sides read per second) as a ratio of a plain numpy copy
  of the same pairs into already-touched buffers, timed alternately with the comparison;
- peak traced memory while comparing, as a multiple of one prompt's pair of tensors,
  and the growth of the process's peak RSS over the loop.

Goals: at least half the copy bandwidth; peak under 4x one pair.

    .venv/bin/python bench/parity_bench.py                      # full size
    .venv/bin/python bench/parity_bench.py --prompts 4 --tokens 1024 --hidden 512
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from infergate.parity.hidden import HiddenStateAccumulator


def _generate(
    rng: np.random.Generator, base: NDArray[np.float32], cand: NDArray[np.float32], index: int
) -> None:
    """A pair whose candidate drifts a little, growing with the prompt index; no temporaries."""
    rng.standard_normal(dtype=np.float32, out=base)
    rng.standard_normal(dtype=np.float32, out=cand)
    cand *= np.float32(1e-3 * (1 + index % 4))
    cand += base


def _copy_seconds(
    src: tuple[NDArray[np.float32], NDArray[np.float32]],
    dst: tuple[NDArray[np.float32], NDArray[np.float32]],
) -> float:
    """Time to copy the pair into buffers that are already allocated and touched."""
    start = time.perf_counter()
    np.copyto(dst[0], src[0])
    np.copyto(dst[1], src[1])
    return time.perf_counter() - start


def _max_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def run(prompts: int, tokens: int, hidden: int, seed: int) -> dict[str, float | int | bool]:
    rng = np.random.default_rng(seed)
    pair_bytes = 2 * tokens * hidden * 4
    base = np.empty((tokens, hidden), np.float32)
    cand = np.empty((tokens, hidden), np.float32)
    # Copy targets for the reference bandwidth: bench apparatus, allocated and touched
    # before tracing starts, so they count in neither memory figure.
    targets = (np.ones_like(base), np.ones_like(cand))

    accumulator = HiddenStateAccumulator()
    rss_before = _max_rss_bytes()
    tracemalloc.start()
    baseline_traced = tracemalloc.get_traced_memory()[0]
    compare_s = copy_s = 0.0
    for index in range(prompts):
        _generate(rng, base, cand, index)
        # Copy and compare each pair, alternating which goes first, so that both see the
        # same machine load and cache state; the ratio of the sums is the figure.
        if index % 2:
            copy_s += _copy_seconds((base, cand), targets)
        start = time.perf_counter()
        accumulator.add(f"p{index}", base, cand)
        compare_s += time.perf_counter() - start
        if not index % 2:
            copy_s += _copy_seconds((base, cand), targets)
    start = time.perf_counter()
    metrics, _ = accumulator.finalize()
    finalize_s = time.perf_counter() - start
    peak_traced = tracemalloc.get_traced_memory()[1] - baseline_traced
    tracemalloc.stop()
    rss_growth = _max_rss_bytes() - rss_before

    compare_bw = prompts * pair_bytes / compare_s
    copy_bw = prompts * pair_bytes / copy_s
    # The pair buffers were allocated before tracing began; count them in the peak.
    peak = peak_traced + pair_bytes
    return {
        "prompts": prompts,
        "tokens": tokens,
        "hidden": hidden,
        "pair_bytes": pair_bytes,
        "compare_seconds": compare_s,
        "finalize_seconds": finalize_s,
        "prompts_per_second": prompts / (compare_s + finalize_s),
        "compare_gb_per_s": compare_bw / 1e9,
        "copy_gb_per_s": copy_bw / 1e9,
        "bandwidth_ratio": compare_bw / copy_bw,
        "peak_traced_bytes": peak,
        "peak_over_pair": peak / pair_bytes,
        "rss_growth_over_pair": rss_growth / pair_bytes,
        "rel_l2_mean": metrics.rel_l2.value or 0.0,
        "goal_bandwidth_met": compare_bw / copy_bw >= 0.5,
        "goal_memory_met": peak / pair_bytes < 4.0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--hidden", type=int, default=3584)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    for name in ("prompts", "tokens", "hidden"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}: {getattr(args, name)} must be at least 1")
    figures = run(args.prompts, args.tokens, args.hidden, args.seed)
    pair_mib = int(figures["pair_bytes"]) / 2**20
    lines = [
        (
            f"parity bench: {args.prompts} prompts x {args.tokens} tokens x {args.hidden} hidden, "
            f"float32 ({pair_mib:.0f} MiB a prompt pair)"
        ),
        (
            f"  compare      {figures['prompts_per_second']:.2f} prompts/s, "
            f"{figures['compare_gb_per_s']:.2f} GB/s read "
            f"({figures['compare_seconds']:.2f} s + finalize {figures['finalize_seconds']:.3f} s)"
        ),
        f"  numpy copy   {figures['copy_gb_per_s']:.2f} GB/s of the same pairs, interleaved",
        (
            f"  bandwidth    {figures['bandwidth_ratio']:.2f} x copy  (goal >= 0.5: "
            f"{'met' if figures['goal_bandwidth_met'] else 'NOT met'})"
        ),
        (
            f"  peak memory  {figures['peak_over_pair']:.2f} x one pair traced, peak RSS grew "
            f"{figures['rss_growth_over_pair']:.2f} x  (goal < 4: "
            f"{'met' if figures['goal_memory_met'] else 'NOT met'})"
        ),
    ]
    print("\n".join(lines))  # noqa: T201 - a benchmark reports on stdout
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
