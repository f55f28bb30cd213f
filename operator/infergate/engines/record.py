"""Run a suite through one engine and write a ParityRecord.

The engine is reached through two channels (see `client`): a serving channel
(tokenize, greedy completion with top-k logprobs, teacher-forced scoring) and an
optional probe channel (last-layer hidden states). Both exist over HTTP and in-process,
so this module imports neither httpx nor an engine.

Prompts reach the engine as production requests do (`generate`): text as text (the
engine's own tokenizer and special tokens), chats through the chat endpoint and its
template, token ids as they are; `ignoreEos` and `maxTokens` per prompt.

Teacher forcing, from sequence position 1: without a baseline, each prompt is scored on
its own sequence (prompt plus output); given the baseline's record, on the baseline's
sequence, and hidden states are taken on it too, so both line up position by position
even after the greedy outputs fork. Scoring the prompt positions is what lets a long
prompt be judged bucket against bucket on its own text.
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
from numpy.typing import NDArray

from infergate.engines.client import Completion, ProbeChannel, ServingChannel, score_from
from infergate.parity.fingerprints import run_fingerprints
from infergate.parity.record import PromptRecord, RecordMeta, TeacherForced
from infergate.recordio import RecordReader, RecordWriter
from infergate.suite import PromptSpec, Suite


class RecordError(RuntimeError):
    """A record cannot be made as asked; the message names the prompt or the option."""


@dataclass(frozen=True)
class RecordSettings:
    """Sampling of a record: greedy, fixed seed, top-k logprobs."""

    max_tokens: int = 64
    long_max_tokens: int = 16
    """Output tokens of long prompts that do not set their own maxTokens."""
    top_logprobs: int = 20
    seed: int = 42
    full_vocab: bool = False
    """Also record full-vocabulary distributions of the generated positions (our adapters)."""

    def tokens_for(self, prompt: PromptSpec) -> int:
        """Output tokens of one prompt: its own maxTokens, else the long or short default."""
        if prompt.max_tokens is not None:
            return prompt.output_tokens(self.max_tokens)
        return self.long_max_tokens if prompt.is_long else self.max_tokens

    def fingerprints(self, suite: Suite) -> dict[str, object]:
        """What both sides were asked to run (parity.fingerprints sampling.* and suite.*)."""
        return run_fingerprints(
            suite_digest=suite.digest(), max_tokens=self.max_tokens, temperature=0.0,
            top_logprobs=self.top_logprobs, seed=self.seed,
        )  # fmt: skip


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
    fingerprints: dict[str, Any] | None = None,
) -> RecordMeta:
    return RecordMeta(
        engine=engine,
        engine_version=engine_version,
        dtype=dtype,
        config_hash=config_hash(engine, engine_version, effective_config),
        model=model,
        suite=suite,
        effective_config=effective_config,
        fingerprints=fingerprints or {},
    )


def generate(
    serving: ServingChannel, prompt: PromptSpec, *, max_tokens: int, top_logprobs: int, seed: int
) -> Completion:
    """One prompt's greedy completion, sent the way production sends it.

    Text goes as text (the engine tokenizes it with its default special tokens), a chat
    through the chat endpoint (the served template), token ids as they are. The
    completion's prompt ids are the ones the engine actually used.
    """
    if prompt.messages is not None:
        return serving.chat(
            [m.model_dump() for m in prompt.messages], max_tokens=max_tokens,
            top_logprobs=top_logprobs, seed=seed, ignore_eos=prompt.ignore_eos,
        )  # fmt: skip
    sent = prompt.text if prompt.text is not None else list(prompt.token_ids or ())
    if prompt.ignore_eos:
        # The protocol's default: channels that predate per-prompt EOS still take this call.
        return serving.complete(sent, max_tokens=max_tokens, top_logprobs=top_logprobs, seed=seed)
    return serving.complete(
        sent, max_tokens=max_tokens, top_logprobs=top_logprobs, seed=seed, ignore_eos=False
    )


def record_prompt(
    prompt: PromptSpec,
    completion: Completion,
    scores: TeacherForced | None,
    hidden: NDArray[np.float32] | None,
) -> PromptRecord:
    """A side's PromptRecord from its completion, its scores and its hidden states."""
    return PromptRecord(
        prompt_id=prompt.id,
        prompt_token_ids=np.asarray(completion.prompt_token_ids, np.int64),
        output_token_ids=np.asarray(completion.token_ids, np.int64),
        top_logprobs=completion.top,
        teacher_forced=scores,
        hidden_states=hidden,
        output_text=completion.text,
        # A chat is tagged so: the comparison's per-stratum figures (short, long, chat).
        tags=dict.fromkeys((*prompt.tags, *(("chat",) if prompt.is_chat else ())), "true"),
        logit_scale=(
            None if completion.logit_scale is None else np.asarray(completion.logit_scale)
        ),
    )


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
    start = time.perf_counter()
    completion = generate(
        serving, prompt, max_tokens=settings.tokens_for(prompt),
        top_logprobs=settings.top_logprobs, seed=settings.seed,
    )  # fmt: skip
    generate_s = time.perf_counter() - start
    ids = list(completion.prompt_token_ids)
    sequence = ids + list(completion.token_ids)
    outputs = len(completion.token_ids)
    if baseline is not None:
        if prompt.id not in baseline:
            raise RecordError(f"--teacher-forced-from: prompt {prompt.id!r} is not in the baseline")
        base = baseline.get(prompt.id)
        sequence = base.prompt_token_ids.tolist() + base.output_token_ids.tolist()
        outputs = int(base.output_token_ids.shape[0])
    start = time.perf_counter()
    teacher_forced = score_from(
        serving, sequence, 1, top_logprobs=settings.top_logprobs, seed=settings.seed,
        full_vocab=outputs if settings.full_vocab else 0,
    )  # fmt: skip
    score_s = time.perf_counter() - start
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
    return record_prompt(prompt, completion, teacher_forced, hidden)
