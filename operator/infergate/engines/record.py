"""Run a suite through one engine and write a ParityRecord.

The engine is reached through two channels (see `client`): a serving channel
(tokenize, greedy completion with top-k logprobs, teacher-forced scoring) and an
optional probe channel (last-layer hidden states). Both exist over HTTP and in-process,
so this module imports neither httpx nor an engine.

Teacher forcing: given the baseline's record, each prompt is also scored on the
baseline's tokens, and hidden states are taken on the baseline's sequence (prompt plus
its output), so they line up position by position with the baseline's even after the
greedy outputs fork. Without a baseline, hidden states cover this engine's own sequence.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from infergate.engines.client import ProbeChannel, ServingChannel
from infergate.parity.record import PromptRecord, RecordMeta
from infergate.recordio import RecordReader, RecordWriter
from infergate.suite import PromptSpec, Suite


class RecordError(RuntimeError):
    """A record cannot be made as asked; the message names the prompt or the option."""


@dataclass(frozen=True)
class RecordSettings:
    """Sampling of a record: greedy, fixed seed, top-k logprobs."""

    max_tokens: int = 64
    long_max_tokens: int = 16
    top_logprobs: int = 5
    seed: int = 42


@dataclass
class RecordStats:
    """What recording took: for the experiment's speed figures."""

    prompts: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    generate_seconds: float = 0.0
    score_seconds: float = 0.0
    hidden_seconds: float = 0.0
    per_prompt: list[dict[str, Any]] = field(default_factory=list)


def config_hash(engine: str, engine_version: str, effective_config: dict[str, Any]) -> str:
    """sha256 over sorted-key JSON of what was run, shortened to 16 hex digits."""
    payload = {"engine": engine, "engineVersion": engine_version, "config": effective_config}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def make_meta(
    *,
    engine: str,
    engine_version: str,
    dtype: str,
    model: str,
    suite: str,
    effective_config: dict[str, Any],
) -> RecordMeta:
    return RecordMeta(
        engine=engine,
        engine_version=engine_version,
        dtype=dtype,
        config_hash=config_hash(engine, engine_version, effective_config),
        model=model,
        suite=suite,
        effective_config=effective_config,
    )


def _prompt_ids(prompt: PromptSpec, serving: ServingChannel) -> list[int]:
    if prompt.token_ids is not None:
        return list(prompt.token_ids)
    assert prompt.text is not None  # noqa: S101 - PromptSpec guarantees one of the two
    return serving.tokenize(prompt.text)


def record_suite(
    suite: Suite,
    serving: ServingChannel,
    probe: ProbeChannel | None,
    *,
    meta: RecordMeta,
    out: Path,
    settings: RecordSettings,
    baseline: RecordReader | None = None,
    progress: Callable[[str], None] | None = None,
    before_prompt: Callable[[PromptSpec], None] | None = None,
) -> RecordStats:
    """Record every prompt of `suite` into `out`; returns timing figures.

    `before_prompt` runs before each prompt is sent (the experiment restarts a
    MindFormers server there before long prompts: MindSpore's CPU memory pool never
    shrinks).
    """
    stats = RecordStats()
    with RecordWriter(out, meta) as writer:
        for prompt in suite.prompts:
            if before_prompt is not None:
                before_prompt(prompt)
            writer.add(
                _record_prompt(
                    prompt, serving, probe, settings=settings, baseline=baseline, stats=stats
                )
            )
            if progress is not None:
                progress(prompt.id)
    return stats


def _record_prompt(
    prompt: PromptSpec,
    serving: ServingChannel,
    probe: ProbeChannel | None,
    *,
    settings: RecordSettings,
    baseline: RecordReader | None,
    stats: RecordStats,
) -> PromptRecord:
    ids = _prompt_ids(prompt, serving)
    max_tokens = settings.long_max_tokens if prompt.is_long else settings.max_tokens
    start = time.perf_counter()
    completion = serving.complete(
        ids, max_tokens=max_tokens, top_logprobs=settings.top_logprobs, seed=settings.seed
    )
    generate_s = time.perf_counter() - start
    teacher_forced = None
    sequence = ids + completion.token_ids
    score_s = 0.0
    if baseline is not None:
        if prompt.id not in baseline:
            raise RecordError(f"--teacher-forced-from: prompt {prompt.id!r} is not in the baseline")
        base = baseline.get(prompt.id)
        base_prompt = base.prompt_token_ids.tolist()
        base_output = base.output_token_ids.tolist()
        start = time.perf_counter()
        teacher_forced = serving.score(
            base_prompt, base_output, top_logprobs=settings.top_logprobs, seed=settings.seed
        )
        score_s = time.perf_counter() - start
        sequence = base_prompt + base_output
    hidden = None
    hidden_s = 0.0
    if probe is not None:
        start = time.perf_counter()
        hidden = probe.hidden_states(sequence)
        hidden_s = time.perf_counter() - start
    stats.prompts += 1
    stats.prompt_tokens += len(ids)
    stats.output_tokens += len(completion.token_ids)
    stats.generate_seconds += generate_s
    stats.score_seconds += score_s
    stats.hidden_seconds += hidden_s
    stats.per_prompt.append(
        {
            "id": prompt.id,
            "promptTokens": len(ids),
            "outputTokens": len(completion.token_ids),
            "generateSeconds": round(generate_s, 4),
            "scoreSeconds": round(score_s, 4),
            "hiddenSeconds": round(hidden_s, 4),
        }
    )
    return PromptRecord(
        prompt_id=prompt.id,
        prompt_token_ids=np.asarray(completion.prompt_token_ids or ids, np.int64),
        output_token_ids=np.asarray(completion.token_ids, np.int64),
        top_logprobs=completion.top,
        teacher_forced=teacher_forced,
        hidden_states=hidden,
        output_text=completion.text,
        tags=dict.fromkeys(prompt.tags, "true"),
    )
