"""The measurement of a calibration: record the A/A runs, then compare each pair.

The runs are recorded by `infergate record` in a process of its own (the engine's venv
Python when in-process), one after the other, each teacher-forced on `base`; the concurrent
run sends the whole suite at once (`infergate.engines.prefetch`). A pair is compared by the
parity core with every check switched off, and its noise summarised
(`infergate.calibration.noise`). A run whose record is already there is not recorded again.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infergate.calibration.noise import pair_report, signed_prompt_measures, suite_digest


class CalibrationError(ValueError):
    """Calibration input that cannot be used; the message names the option."""


@dataclass(frozen=True)
class CalibrationRuns:
    """The A/A runs to record: one engine, model and suite, in `work`."""

    engine: str
    model: Path
    dtype: str
    suite: str
    work: Path
    url: str | None
    """A serving endpoint to record through, instead of in-process."""
    probe_url: str | None
    concurrency: int
    """Also record with this many requests in flight (0 or 1: not)."""
    also_dtype: str | None
    """Also record this dtype, teacher-forced on `base`: always in-process from `model`,
    never through `url`, which serves one dtype only (a plain vLLM server cannot say
    which, so a record through it would carry the base dtype's numbers under this
    dtype's name, and an A/A pair would be kept as the dtype change)."""
    max_tokens: int
    long_max_tokens: int


def analyse_pair(label: str, baseline_dir: Path, candidate_dir: Path) -> tuple[dict[str, Any], str]:
    """Compare two records with the core (no thresholds) and summarise the noise."""
    from infergate.parity.compare import compare_sources
    from infergate.parity.profiles import PROFILES, model_depth, suggest_profile
    from infergate.recordio import RecordReader

    baseline = RecordReader(baseline_dir)
    candidate = RecordReader(candidate_dir)
    profile, _ = suggest_profile(baseline.meta, candidate.meta)
    # Only the profile's fork tau and the KL-ratio floor matter to the measurement; every
    # check is switched off and every config key may differ (it is noise being measured).
    block = PROFILES[profile].block
    thresholds = type(block)(max_divergence_logprob_gap=block.max_divergence_logprob_gap)
    result = compare_sources(baseline, candidate, thresholds, ("*",))
    signed = [
        signed_prompt_measures(baseline.get(pid), candidate.get(pid))
        for pid in baseline.prompt_ids
        if pid in candidate
    ]
    report = pair_report(label, result.model_dump(mode="json", by_alias=True), signed)
    report["layers"] = model_depth(baseline.meta, candidate.meta)
    return report, suite_digest(baseline)


def _record_cli(
    runs: CalibrationRuns, dtype: str, out: Path, base: Path | None, *, served: bool = True
) -> list[str]:
    command = [
        sys.executable, "-m", "infergate.cli", "record", "--engine", runs.engine,
        "--model", str(runs.model), "--dtype", dtype, "--suite", runs.suite, "--out", str(out),
        "--max-tokens", str(runs.max_tokens), "--long-max-tokens", str(runs.long_max_tokens),
    ]  # fmt: skip
    if runs.url and served:
        command += ["--url", runs.url]
    if runs.probe_url and served:
        command += ["--probe-url", runs.probe_url]
    if base is not None:
        command += ["--teacher-forced-from", str(base)]
    return command


def record_runs(runs: CalibrationRuns) -> list[tuple[str, Path, Path]]:
    """Record the A/A runs asked for; returns the pairs to analyse."""
    work = runs.work
    base = work / "base"
    pairs: list[tuple[str, Path, Path]] = []
    planned: list[tuple[str, str, Path, Path | None]] = [
        ("base", runs.dtype, base, None),
        (f"{runs.dtype} A/A", runs.dtype, work / "again", base),
    ]
    if runs.also_dtype:
        planned.append(
            (f"{runs.also_dtype} vs {runs.dtype}", runs.also_dtype, work / runs.also_dtype, base)
        )
    for label, dtype, out, against in planned:
        if not (out / "manifest.json").exists():
            served = dtype == runs.dtype  # the server serves the base dtype only
            command = _record_cli(runs, dtype, out, against, served=served)
            done = subprocess.run(command, check=False)
            if done.returncode != 0:
                raise CalibrationError(f"recording {out} failed (exit {done.returncode})")
        if against is not None:
            pairs.append((label, against, out))
    if runs.concurrency > 1:
        out = work / f"concurrent-{runs.concurrency}"
        if not (out / "manifest.json").exists():
            record_concurrent(runs, out, base)
        pairs.append((f"{runs.dtype} concurrency {runs.concurrency}", base, out))
    return pairs


def record_concurrent(runs: CalibrationRuns, out: Path, baseline_dir: Path) -> None:
    """Record the suite with every request in flight at once, teacher-forced on base."""
    from infergate.commands import record as record_command
    from infergate.engines.prefetch import ThreadedPrefetch, batched_vllm_channel
    from infergate.engines.record import RecordSettings, record_suite
    from infergate.recordio import RecordReader
    from infergate.suite import load_suite

    suite = load_suite(runs.suite)
    baseline = RecordReader(baseline_dir)
    # The options `infergate record` would have for this run, for its HTTP channel set-up.
    namespace = argparse.Namespace(
        engine=runs.engine, model=runs.model, dtype=runs.dtype, url=runs.url,
        probe_url=runs.probe_url, max_model_len=None, seed=42, no_hidden_states=False,
    )  # fmt: skip
    settings = RecordSettings(max_tokens=runs.max_tokens, long_max_tokens=runs.long_max_tokens)
    if runs.url:
        serving, probe, meta = record_command._http_channels(
            namespace, {}, runs.model.name, suite.name
        )
        channels: Any = ThreadedPrefetch(serving, probe, runs.concurrency)
        # A server without a hidden-state probe (no --probe-url, vLLM) records no states.
        states: Any = channels if probe is not None else None
    elif runs.engine == "vllm":
        from infergate.engines.record import make_meta
        from infergate.runtime.model_config import load_model_config

        config = load_model_config(runs.model)
        vllm = batched_vllm_channel(runs.model, runs.dtype, config.max_position_embeddings)
        meta = make_meta(
            engine="vllm", engine_version=vllm.version, dtype=runs.dtype, model=runs.model.name,
            suite=suite.name, effective_config=config.effective(runs.dtype),
        )  # fmt: skip
        channels = states = vllm
    else:
        raise CalibrationError(
            f"--concurrency: {runs.engine} in-process runs one request at a time; "
            "give --url of a server to send concurrent requests"
        )
    channels.prefetch(suite, settings, baseline)
    record_suite(suite, channels, states, meta=meta, out=out, settings=settings, baseline=baseline)
