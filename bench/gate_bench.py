"""Gate-quality benchmark: does the parity gate block harmful changes and pass benign ones?

Candidates are variants of the fixture model (`infergate.fixture.variants`: generated,
never downloaded) and engine or runtime changes of the same model, each recorded on a
real engine (transformers, vLLM or MindFormers, in-process, the way `infergate record`
records) against the baseline a rollout would compare it with, teacher-forced on it.
Each is judged by `infergate parity compare --profile P`, P being the profile a user
would choose for that change, on growing prefixes of one suite (8, 16, 32, 64 short
prompts, each with the suite's 4 long prompts of 8K+ tokens). A row is correct when a
harmful candidate is Failed and a benign one Passed; "prompts needed" is the smallest
prefix whose verdict is decided (Passed or Failed) and correct.

Short prompts generate MAX_TOKENS (16) output tokens, or as many as the profile of a
candidate needs to judge its fork rule (fp32-cross-framework: 64), for every side
compared with or teacher-forced on such a side (`side_tokens`). The count is part of
each record's, prefix's and verdict's path, so a record made with another count is
never reused for it.

    make gate-bench                       # records in out/gate-bench, table in experiments/
    .venv/bin/python bench/gate_bench.py --only eps-1e-5 vllm-batched   # some rows
    make gate-bench GATE_BENCH_ONLY=eps-1e-5,vllm-batched                # the same

Records already complete are reused, so an interrupted run resumes. Writes
experiments/GATE_BENCH.md and experiments/gate_bench.json (and the same under --out);
a run of some rows keeps the table's other rows as the last run left them, and says so.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import redirect_stdout
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from typing import Any

from infergate.cli import main as infergate_main
from infergate.engines.venvs import engine_environment, engine_python
from infergate.fixture.corpus import CHINESE, ENGLISH, generated_sentences, held_out_sentences
from infergate.fixture.generate import GENERATOR_VERSION, FixtureSpec, default_model_dir
from infergate.parity.profiles import PROFILES
from infergate.parity.thresholds import ProfileName
from infergate.recordio import MANIFEST, RecordReader, RecordWriter
from infergate.suite import PromptSpec, Suite, load_suite, long_prompt

REPO = Path(__file__).resolve().parent.parent
LADDER = (8, 16, 32, 64)
MAX_TOKENS = 16
"""Output tokens per short prompt, unless a candidate's profile needs more (`side_tokens`)."""
LONG_MAX_TOKENS = 8
TOP_LOGPROBS = 20
SERVED_NAME = "fixture"
SUITE_NAME = "gate-bench"
KERNEL_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
"""A kernel change without touching the model: torch's vectorised kernels and oneDNN's
matmuls limited to AVX2 (no AVX-512, no AMX), so reductions run in another order."""


@dataclass(frozen=True)
class Side:
    """One record to make: an engine, a dtype, a model variant, teacher-forced on `against`."""

    key: str
    engine: str
    dtype: str
    model: str = "base"
    against: str | None = None
    batched: bool = False
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Candidate:
    name: str
    kind: str
    change: str
    baseline: str
    candidate: str
    profile: str


SIDES: tuple[Side, ...] = (
    Side("tf32", "transformers", "float32"),
    Side("tf-bf16", "transformers", "bfloat16"),
    Side("tf16@tf32", "transformers", "float16", against="tf32"),
    Side("tf-bf16@tf32", "transformers", "bfloat16", against="tf32"),
    Side("tf32-again@tf32", "transformers", "float32", against="tf32"),
    Side("tf-bf16-again@tf-bf16", "transformers", "bfloat16", against="tf-bf16"),
    Side("tf-bf16-resharded@tf-bf16", "transformers", "bfloat16", "resharded", "tf-bf16"),
    Side("tf-bf16-tokfiles@tf-bf16", "transformers", "bfloat16", "tokenizer-files", "tf-bf16"),
    Side("tf-bf16-eps@tf-bf16", "transformers", "bfloat16", "eps-1e-5", "tf-bf16"),
    Side("tf-bf16-rope@tf-bf16", "transformers", "bfloat16", "rope-1e4", "tf-bf16"),
    Side("tf-bf16-corrupt@tf-bf16", "transformers", "bfloat16", "corrupt-layer-1", "tf-bf16"),
    Side("tf-bf16-norm@tf-bf16", "transformers", "bfloat16", "final-norm-x1.02", "tf-bf16"),
    Side("tf-bf16-q8@tf-bf16", "transformers", "bfloat16", "q8_0", "tf-bf16"),
    Side("tf-bf16-nobias@tf-bf16", "transformers", "bfloat16", "no-qkv-bias", "tf-bf16"),
    Side("tf-bf16-bos@tf-bf16", "transformers", "bfloat16", "tokenizer-bos", "tf-bf16"),
    Side("tf-bf16-chat@tf-bf16", "transformers", "bfloat16", "chat-template", "tf-bf16"),
    Side("tf-bf16-geneos@tf-bf16", "transformers", "bfloat16", "generation-eos", "tf-bf16"),
    Side("tf-bf16-massive", "transformers", "bfloat16", "massive-activations"),
    Side(
        "tf16-massive@tf-bf16-massive",
        "transformers",
        "float16",
        "massive-activations",
        "tf-bf16-massive",
    ),
    Side("tf-bf16-avx2@tf-bf16", "transformers", "bfloat16", against="tf-bf16", env=KERNEL_ENV),
    Side("mf32", "mindformers", "float32"),
    Side("tf32@mf32", "transformers", "float32", against="mf32"),
    Side("vllm32", "vllm", "float32"),
    Side("vllm32@tf32", "vllm", "float32", against="tf32"),
    Side("vllm-bf16@vllm32", "vllm", "bfloat16", against="vllm32"),
    Side("vllm-bf16", "vllm", "bfloat16"),
    Side("vllm-bf16-batched@vllm-bf16", "vllm", "bfloat16", against="vllm-bf16", batched=True),
)
CALIBRATION_SIDES: tuple[Side, ...] = (
    Side("cal-tf32", "transformers", "float32"),
    Side("cal-tf32-again@cal-tf32", "transformers", "float32", against="cal-tf32"),
    Side("cal-tf-bf16@cal-tf32", "transformers", "bfloat16", against="cal-tf32"),
    Side("cal-tf16@cal-tf32", "transformers", "float16", against="cal-tf32"),
    Side("cal-tf-bf16", "transformers", "bfloat16"),
    Side("cal-tf-bf16-again@cal-tf-bf16", "transformers", "bfloat16", against="cal-tf-bf16"),
    Side("cal-tf32@cal-tf-bf16", "transformers", "float32", against="cal-tf-bf16"),
)
"""The pairs a platform team keeps for a stable revision (`infergate parity calibrate`),
recorded on the calibration suite (`calibration_suite`: no prompt of the bench's)."""
SIDE = {s.key: s for s in (*SIDES, *CALIBRATION_SIDES)}

H, B = "harmful", "benign"
CANDIDATES: tuple[Candidate, ...] = (
    Candidate("eps-1e-5", H, "rms_norm_eps 1e-6 -> 1e-5 in config.json", "tf-bf16",
              "tf-bf16-eps@tf-bf16", "bf16-kernel"),
    Candidate("rope-theta-1e4", H, "rope theta 1e6 -> 1e4 in config.json", "tf-bf16",
              "tf-bf16-rope@tf-bf16", "bf16-kernel"),
    Candidate("corrupt-layer-1", H, "layer 1 matrices + 10% Gaussian noise", "tf-bf16",
              "tf-bf16-corrupt@tf-bf16", "bf16-kernel"),
    Candidate("final-norm-x1.02", H, "final norm weight x 1.02, bf16", "tf-bf16",
              "tf-bf16-norm@tf-bf16", "bf16-kernel"),
    Candidate("q8_0-weights", H, "every matrix rounded as llama.cpp q8_0 (blocks of 32, one "
              "scale each), run in bf16", "tf-bf16", "tf-bf16-q8@tf-bf16", "bf16-kernel"),
    Candidate("tokenizer-adds-bos", H, "tokenizer.json post-processor prepends <|endoftext|>",
              "tf-bf16", "tf-bf16-bos@tf-bf16", "bf16-kernel"),
    Candidate("chat-template", H, "chat template: newline after the role -> ': '", "tf-bf16",
              "tf-bf16-chat@tf-bf16", "bf16-kernel"),
    Candidate("fp16-overflow", H, "bf16 -> fp16 on a model whose residual stream peaks at 4x "
              "65504", "tf-bf16-massive", "tf16-massive@tf-bf16-massive", "dtype-change"),
    Candidate("generation-eos", H, "generation_config.json eos_token_id -> <|im_end|>",
              "tf-bf16", "tf-bf16-geneos@tf-bf16", "bf16-kernel"),
    Candidate("qkv-bias-dropped", H, "q/k/v biases zeroed (a converter unaware of them)",
              "tf-bf16", "tf-bf16-nobias@tf-bf16", "bf16-kernel"),
    Candidate("vllm-vs-transformers", B, "same weights: transformers fp32 -> vLLM fp32", "tf32",
              "vllm32@tf32", "fp32-cross-framework"),
    Candidate("mindformers-vs-transformers", B, "same weights: MindFormers fp32 -> "
              "transformers fp32", "mf32", "tf32@mf32", "fp32-cross-framework"),
    Candidate("vllm-bf16-vs-fp32", B, "vLLM fp32 -> vLLM bf16", "vllm32", "vllm-bf16@vllm32",
              "dtype-change"),
    Candidate("transformers-bf16-vs-fp32", B, "transformers fp32 -> bf16", "tf32",
              "tf-bf16@tf32", "dtype-change"),
    Candidate("transformers-fp16-vs-fp32", B, "transformers fp32 -> fp16", "tf32", "tf16@tf32",
              "dtype-change"),
    Candidate("vllm-batched", B, "vLLM bf16: one request at a time -> the whole suite in one "
              "batch", "vllm-bf16", "vllm-bf16-batched@vllm-bf16", "bf16-kernel"),
    Candidate("kernel-avx2", B, "transformers bf16: default CPU kernels -> AVX2 only "
              "(ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA)", "tf-bf16", "tf-bf16-avx2@tf-bf16",
              "bf16-kernel"),
    Candidate("resharded", B, "same tensors re-saved as 3 shards + index", "tf-bf16",
              "tf-bf16-resharded@tf-bf16", "strict"),
    Candidate("tokenizer-files", B, "vocab.json + merges.txt added beside tokenizer.json",
              "tf-bf16", "tf-bf16-tokfiles@tf-bf16", "strict"),
    Candidate("same-config-again", B, "A/A: the same transformers bf16 config recorded again",
              "tf-bf16", "tf-bf16-again@tf-bf16", "strict"),
    Candidate("same-config-again-fp32", B, "A/A: the same transformers fp32 config recorded "
              "again", "tf32", "tf32-again@tf32", "strict"),
)  # fmt: skip


@dataclass(frozen=True)
class Calibration:
    """The noise record kept for one stable revision of the bench: the bench side it
    stands for (`baseline`: a row whose baseline is that side is judged with it), and the
    pairs recorded for it on the calibration suite, each (label, base side, candidate side)."""

    baseline: str
    base: str
    pairs: tuple[tuple[str, str, str], ...]
    file: str


CALIBRATIONS: tuple[Calibration, ...] = (
    Calibration("tf32", "cal-tf32", (
        ("fp32-aa", "cal-tf32", "cal-tf32-again@cal-tf32"),
        ("bf16-vs-fp32", "cal-tf32", "cal-tf-bf16@cal-tf32"),
        ("fp16-vs-fp32", "cal-tf32", "cal-tf16@cal-tf32"),
    ), "gate_bench_noise_fp32.json"),
    Calibration("tf-bf16", "cal-tf-bf16", (
        ("bf16-aa", "cal-tf-bf16", "cal-tf-bf16-again@cal-tf-bf16"),
        ("fp32-vs-bf16", "cal-tf-bf16", "cal-tf32@cal-tf-bf16"),
    ), "gate_bench_noise_bf16.json"),
)  # fmt: skip
"""transformers fp32 (the stable of the dtype-change rows: A/A, bf16 and fp16 on the same
weights) and transformers bf16 (the stable of the bf16-kernel rows: A/A, and float32
teacher-forced on it, the bfloat16-vs-float32 envelope `parity.calibrated._envelope`
finds under `dtype float32` of a bfloat16 record). Rows on other baselines (vLLM,
MindFormers, the massive-activations model) keep static limits: nothing is kept for them."""


# ------------------------------------------------------------- generated tokens


def profile_tokens(profile: str) -> int:
    """Output tokens per short prompt that `profile`'s checks need to be judged at all.

    A prompt is evidence for the fork rule (minFirstDivergenceP10 = L: at most 10% of
    prompts fork unexplained before L output tokens) only once it is generated to L
    tokens or forks before; with fewer, that check is Inconclusive whatever the numbers.
    So L when it is above MAX_TOKENS, else MAX_TOKENS.
    """
    horizon = PROFILES[ProfileName(profile)].block.min_first_divergence_p10
    return MAX_TOKENS if horizon is None else max(MAX_TOKENS, math.ceil(horizon))


def side_tokens(
    candidates: Sequence[Candidate] = CANDIDATES, sides: Sequence[Side] = SIDES
) -> dict[str, int]:
    """Output tokens per short prompt each side is recorded with.

    Sides compared with each other (a candidate's two sides) or teacher-forced one on
    another must be asked the same (`sampling.max_tokens` is a fingerprint both sides
    share), so they form groups; a group takes the most any of its candidates' profiles
    needs, every other side keeps MAX_TOKENS (fewer tokens, less time). Taken over every
    candidate of the bench, so a side's count does not depend on which rows a run selects.
    """
    against = {s.key: s.against for s in sides}
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        parent.setdefault(key, key)
        while parent[key] != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    def join(a: str, b: str) -> None:
        parent[root(a)] = root(b)

    for key, base in against.items():
        root(key)
        if base is not None:
            join(key, base)
    for candidate in candidates:
        join(candidate.baseline, candidate.candidate)
    need: dict[str, int] = {}
    for candidate in candidates:
        group = root(candidate.baseline)
        need[group] = max(need.get(group, MAX_TOKENS), profile_tokens(candidate.profile))
    return {key: need.get(root(key), MAX_TOKENS) for key in parent}


TOKENS = side_tokens()
TOKENS.update(
    {s.key: TOKENS[c.baseline] for c in CALIBRATIONS for s in CALIBRATION_SIDES
     if c.base in (s.key, s.against)}
)  # fmt: skip
"""Output tokens per short prompt of every side of the bench; a calibration's sides as
many as the stable they calibrate (the fork margin's noise depends on the length)."""


def record_dir(out: Path, key: str, tokens: int | None = None) -> Path:
    """Where a side's record lives: its token count is part of the name, so a record made
    with another count (an older bench, another profile) is never taken for this one."""
    count = TOKENS[key] if tokens is None else tokens
    return out / "records" / f"{key}.{count}tok"


class StaleRecordError(RuntimeError):
    """A record on disk was made with other sampling than its side asks for now."""


def recorded_tokens(path: Path) -> int | None:
    """The `sampling.max_tokens` a finished record was made with (None: not finished)."""
    if not (path / MANIFEST).exists():
        return None
    value = RecordReader(path).meta.fingerprints.get("sampling.max_tokens")
    return None if value is None else int(value)


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)  # noqa: T201 - progress


# ------------------------------------------------------------------------------- suite


def _language(sentence: str) -> str:
    return "zh" if ord(sentence[0]) > 0x2E80 else "en"


def _opening(sentence: str) -> str:
    """A sentence's beginning, as a short prompt: half its words (English; at least 2) or
    a third of its characters (Chinese; at least 3)."""
    if _language(sentence) == "en":
        words = sentence.split()
        return " ".join(words[: max(2, len(words) // 2)])
    return sentence[: max(3, len(sentence) // 3)]


def bench_suite() -> Suite:
    """64 short prompts and the default suite's 4 long ones (8K+ tokens), in a fixed order.

    The default suite's 16 short prompts first, then beginnings of the hand-written
    corpus sentences the model knows, then beginnings of held-out grammar sentences it
    never saw, English and Chinese alternating.
    """
    default = load_suite("default").select(long=False, chat=False).prompts
    prompts: list[PromptSpec] = list(default)
    texts = {p.text for p in prompts}

    def add(pid: str, text: str, language: str) -> None:
        if text not in texts and len(prompts) < 64:
            texts.add(text)
            prompts.append(PromptSpec(id=pid, text=text, tags=(language, "short")))

    for index, (en, zh) in enumerate(zip(ENGLISH, CHINESE, strict=True)):
        if len(prompts) >= 48:
            break
        add(f"en-corpus-{index}", _opening(en), "en")
        add(f"zh-corpus-{index}", _opening(zh), "zh")
    training = generated_sentences(FixtureSpec().generated_sentences, FixtureSpec().seed)
    for index, sentence in enumerate(held_out_sentences(200, training)):
        language = _language(sentence)
        add(f"{language}-grammar-{index}", _opening(sentence), language)
    # The default suite's long prompts (4: the profiles' minimum long evidence), as it sends them.
    long = load_suite("default").select(long=True).prompts
    return Suite(SUITE_NAME, (*prompts[:64], *long))


CALIBRATION_SUITE_NAME = "gate-bench-calibration"
CALIBRATION_SEED = 29
"""Seed of the calibration suite's grammar sentences (the bench's held-out ones: 7)."""


def calibration_suite() -> Suite:
    """The bench suite's shape (64 short prompts, English and Chinese alternating; 4 long
    prompts of 8K+ tokens), none of its prompts: what a team records its stable's noise
    on is not the check's suite.

    Beginnings of the corpus sentences the bench does not use (it takes the first ones),
    cut as the bench cuts them, then beginnings of grammar sentences drawn with another
    seed, neither in the fixture's training set nor in the bench; the long prompts are
    the default suite's generator at indices 2 and 3 (the bench's are 0 and 1).
    """
    bench = bench_suite()
    used = {p.text for p in bench.prompts}
    short = [t for t in (p.text for p in bench.select(long=False).prompts) if t]
    sources = {p.id.rsplit("-", 1)[1] for p in bench.prompts if "-corpus-" in p.id}
    prompts: list[PromptSpec] = []
    texts: set[str] = set()

    def add(pid: str, text: str, language: str) -> None:
        clash = any(text in u or u in text for u in short)  # not the same, nor a prefix
        if not clash and text not in texts and len(prompts) < 64:
            texts.add(text)
            prompts.append(PromptSpec(id=f"cal-{pid}", text=text, tags=(language, "short")))

    for index, (en, zh) in enumerate(zip(ENGLISH, CHINESE, strict=True)):
        if str(index) in sources or len(prompts) >= 48:
            continue
        add(f"en-corpus-{index}", _opening(en), "en")
        add(f"zh-corpus-{index}", _opening(zh), "zh")
    training = set(generated_sentences(FixtureSpec().generated_sentences, FixtureSpec().seed))
    for index, sentence in enumerate(generated_sentences(2000, CALIBRATION_SEED)):
        if sentence in training:
            continue
        language = _language(sentence)
        add(f"{language}-grammar-{index}", _opening(sentence), language)
    long = [
        long_prompt(language, index).model_copy(update={"max_tokens": LONG_MAX_TOKENS})
        for language in ("zh", "en")
        for index in (2, 3)
    ]
    if {p.text for p in long} & used or len(prompts) < 64:
        raise RuntimeError("calibration suite: not 64 short prompts disjoint from the bench's")
    return Suite(CALIBRATION_SUITE_NAME, (*prompts, *long))


def write_suite(path: Path, suite: Suite | None = None) -> Suite:
    suite = bench_suite() if suite is None else suite
    lines = [p.model_dump_json(by_alias=True, exclude_none=True) for p in suite.prompts]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return suite


# -------------------------------------------------------------- worker (engine venv)


def make_variants(base: Path, root: Path) -> dict[str, Path]:
    """Every model variant the sides use, under `root` (made once, reused)."""
    from infergate.fixture import variants as v

    makers: dict[str, Any] = {
        "resharded": v.reshard(3),
        "tokenizer-files": v.tokenizer_with_vocab_files(),
        "eps-1e-5": v.norm_epsilon(1e-5),
        "rope-1e4": v.rope_theta(1e4),
        "corrupt-layer-1": v.corrupt_layer(1, 0.10, seed=13),
        "q8_0": v.quantize_q8_0(),
        "final-norm-x1.02": v.scale_final_norm(1.02),
        "no-qkv-bias": v.drop_qkv_bias(),
        "tokenizer-bos": v.tokenizer_adds_bos(),
        "chat-template": v.chat_template(v.CHANGED_CHAT_TEMPLATE),
        "generation-eos": v.generation_eos(),
    }
    paths = {"base": base}
    for name, make in makers.items():
        paths[name] = _variant(root, name, base, make)
    factor = v.residual_scale_for_fp16_overflow(base, _residual_max(base))
    paths["massive-activations"] = _variant(
        root, "massive-activations", base, v.residual_scale(factor)
    )
    return paths


def _variant(root: Path, name: str, base: Path, make: Any) -> Path:
    target = root / name
    done = target / ".made"
    if not done.exists():
        make(base, target)
        done.write_text(GENERATOR_VERSION + "\n")
    return target


def _residual_max(model_dir: Path) -> float:
    """Largest |residual stream| element over the bench suite's short prompts, float32."""
    import torch
    from transformers import AutoModelForCausalLM

    from infergate.runtime.tokenizer import ModelTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    tokenizer = ModelTokenizer(model_dir)
    peak = 0.0
    with torch.inference_mode():
        for prompt in bench_suite().select(long=False, chat=False).prompts:
            assert prompt.text is not None  # noqa: S101 - the bench suite is text
            ids = torch.tensor([tokenizer.encode(prompt.text)])
            states = model(input_ids=ids, output_hidden_states=True).hidden_states[:-1]
            peak = max(peak, *(float(h.abs().max()) for h in states))
    return peak


def worker(keys: Sequence[str], out: Path, suite_path: Path, threads: int | None = None) -> None:
    """Record the given sides (engine venv): transformers one by one, vLLM per dtype.

    With no keys it only makes the model variants (once, before workers run in parallel).
    """
    from infergate.suite import load_suite as load

    if threads:
        import torch

        torch.set_num_threads(threads)

    suite = load(str(suite_path))
    models = make_variants(default_model_dir(), out / "variants")
    timings: dict[str, Any] = {}
    todo = [SIDE[k] for k in keys if not _done(out, k)]
    vllm = [s for s in todo if s.engine == "vllm"]
    for side in (s for s in todo if s.engine == "transformers"):
        timings[side.key] = _record_transformers(side, models, suite, _settings(side), out)

    # One engine per dtype; a dtype whose sides are forced on another dtype's record goes
    # after it (vLLM bf16 teacher-forced on vLLM fp32).
    def needs_other(dtype: str) -> bool:
        return any(
            s.against and SIDE[s.against].engine == "vllm" and SIDE[s.against].dtype != dtype
            for s in vllm
            if s.dtype == dtype
        )

    for dtype in sorted({s.dtype for s in vllm}, key=lambda d: (needs_other(d), d)):
        timings.update(_record_vllm([s for s in vllm if s.dtype == dtype], suite, out))
    path = out / "timings" / f"worker-{os.getpid()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(timings, indent=1) + "\n")


def _settings(side: Side) -> Any:
    from infergate.engines.record import RecordSettings

    return RecordSettings(
        max_tokens=TOKENS[side.key], long_max_tokens=LONG_MAX_TOKENS, top_logprobs=TOP_LOGPROBS
    )


def _baseline(side: Side, out: Path) -> RecordReader | None:
    return RecordReader(record_dir(out, side.against)) if side.against else None


def _record_transformers(
    side: Side, models: dict[str, Path], suite: Suite, settings: Any, out: Path
) -> dict[str, Any]:
    from infergate.engines.inprocess import BackendChannel
    from infergate.engines.record import make_meta, record_suite
    from infergate.runtime.transformers_backend import TransformersBackend

    started = time.perf_counter()
    backend = TransformersBackend(models[side.model], side.dtype, {}, seed=settings.seed)
    loaded = time.perf_counter() - started
    channel = BackendChannel(backend)
    meta = make_meta(
        engine="transformers", engine_version=backend.engine_version, dtype=side.dtype,
        model=SERVED_NAME, suite=suite.name, effective_config=backend.effective_config(),
        fingerprints={**backend.fingerprints(), **settings.fingerprints(suite)},
    )  # fmt: skip
    _log(f"recording {side.key}")
    stats = record_suite(
        suite, channel, channel, meta=meta, out=record_dir(out, side.key), settings=settings,
        baseline=_baseline(side, out),
    )  # fmt: skip
    return {
        "loadSeconds": round(loaded, 1),
        "recordSeconds": round(time.perf_counter() - started - loaded, 1),
        "engineSeconds": round(_seconds(stats), 1),
        "longSeconds": round(_long_seconds(stats), 1),
    }


def _long_seconds(stats: Any) -> float:
    return float(
        sum(
            p["generateSeconds"] + p["scoreSeconds"] + p["hiddenSeconds"]
            for p in stats.per_prompt
            if p["promptTokens"] >= 8192
        )
    )


def _seconds(stats: Any) -> float:
    return float(stats.generate_seconds + stats.score_seconds + stats.hidden_seconds)


def _record_vllm(sides: list[Side], suite: Suite, out: Path) -> dict[str, dict[str, Any]]:
    from infergate.engines.prefetch import batched_vllm_channel
    from infergate.engines.record import make_meta, record_suite
    from infergate.runtime.fingerprints import model_fingerprints
    from infergate.runtime.model_config import load_model_config

    model = default_model_dir()
    config = load_model_config(model)
    started = time.perf_counter()
    channel = batched_vllm_channel(model, sides[0].dtype, config.max_position_embeddings)
    loaded = time.perf_counter() - started
    effective = config.effective(sides[0].dtype)
    fingerprints = model_fingerprints(
        model, engine="vllm", engine_version=channel.version, dtype=sides[0].dtype,
        loaded_config=effective, encode=channel.tokenize,
    )  # fmt: skip
    channel.complete([1, 2, 3], max_tokens=2, top_logprobs=0, seed=42)  # warm-up
    timings: dict[str, dict[str, Any]] = {}
    # Plain records first: teacher-forced ones may be forced on them.
    for side in sorted(sides, key=lambda s: s.against is not None):
        _log(f"recording {side.key} ({TOKENS[side.key]} tokens)")
        settings = _settings(side)
        meta = make_meta(
            engine="vllm", engine_version=channel.version, dtype=sides[0].dtype,
            model=SERVED_NAME, suite=suite.name, effective_config=effective,
            fingerprints={**fingerprints, **settings.fingerprints(suite)},
        )  # fmt: skip
        begun = time.perf_counter()
        baseline = _baseline(side, out)
        if side.batched and baseline is not None:
            channel.prefetch(suite, settings, baseline)
        stats = record_suite(
            suite, channel, channel, meta=meta, out=record_dir(out, side.key),
            settings=settings, baseline=baseline,
        )  # fmt: skip
        timings[side.key] = {
            "loadSeconds": round(loaded, 1),
            "recordSeconds": round(time.perf_counter() - begun, 1),
            "engineSeconds": round(_seconds(stats), 1),
            "longSeconds": round(_long_seconds(stats), 1),
        }
    return timings


# -------------------------------------------------------------------- driver (dev venv)


def _record_cli(side: Side, out: Path, suite_path: Path, model: Path) -> list[str]:
    command = [
        str(engine_python(side.engine)), "-m", "infergate.cli", "record",
        "--engine", side.engine, "--model", str(model), "--dtype", side.dtype,
        "--suite", str(suite_path), "--out", str(record_dir(out, side.key)),
        "--served-model-name", SERVED_NAME, "--max-tokens", str(TOKENS[side.key]),
        "--long-max-tokens", str(LONG_MAX_TOKENS), "--top-logprobs", str(TOP_LOGPROBS),
    ]  # fmt: skip
    if side.against:
        command += ["--teacher-forced-from", str(record_dir(out, side.against))]
    return command


def _done(out: Path, key: str) -> bool:
    """Whether the side's record is finished; one made with another token count fails."""
    path = record_dir(out, key)
    made = recorded_tokens(path)
    if made is not None and made != TOKENS[key]:
        raise StaleRecordError(
            f"{path}: recorded with {made} output tokens, the bench asks {TOKENS[key]}; "
            "remove it to record again"
        )
    return made is not None


def _start_cli(side: Side, out: Path, suite_path: Path) -> subprocess.Popen[bytes] | None:
    if _done(out, side.key):
        return None
    log = out / "logs" / f"{side.key}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    _log(f"recording {side.key} ({side.engine}, {TOKENS[side.key]} tokens, separate process)")
    env = engine_environment({**os.environ, **side.env})
    with log.open("wb") as handle:
        return subprocess.Popen(
            _record_cli(side, out, suite_path, default_model_dir()),
            env=env, stdout=handle, stderr=subprocess.STDOUT,
        )  # fmt: skip


def _wait(process: subprocess.Popen[bytes] | None, what: str) -> None:
    if process is not None and process.wait() != 0:
        raise RuntimeError(f"{what}: exit {process.returncode}; see its log under out/")


def _start_worker(
    keys: Sequence[str],
    out: Path,
    suite_path: Path,
    *,
    extra_env: dict[str, str] | None = None,
    threads: int | None = None,
) -> subprocess.Popen[bytes]:
    command = [
        str(engine_python("vllm")), str(REPO / "bench" / "gate_bench.py"), "worker",
        "--out", str(out), "--suite", str(suite_path), "--keys", *keys,
    ]  # fmt: skip
    if threads:
        command += ["--threads", str(threads)]
    env = engine_environment(
        {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", **(extra_env or {})}
    )
    return subprocess.Popen(command, env=env)


def _run_worker(keys: Sequence[str], out: Path, suite_path: Path) -> None:
    if all(_done(out, k) for k in keys):
        return
    _wait(_start_worker(keys, out, suite_path), f"worker {' '.join(keys)}")


def _run_parallel(keys: Sequence[str], out: Path, suite_path: Path, jobs: int) -> None:
    """Record transformers sides in up to `jobs` worker processes at once, the cores
    shared out; a side with its own environment (a kernel change) gets its own worker."""
    todo = [k for k in keys if not _done(out, k)]
    plain = [k for k in todo if not SIDE[k].env]
    chunks: list[tuple[list[str], dict[str, str]]] = [
        (plain[i::jobs], {}) for i in range(min(jobs, len(plain)))
    ]
    chunks += [([k], SIDE[k].env) for k in todo if SIDE[k].env]
    if not chunks:
        return
    threads = max(1, (os.cpu_count() or 1) // len(chunks)) if jobs > 1 else None
    running = []
    for chunk, env in chunks:
        _log(f"worker: {' '.join(chunk)}")
        running.append((chunk, _start_worker(chunk, out, suite_path, extra_env=env,
                                             threads=threads)))  # fmt: skip
    for chunk, process in running:
        _wait(process, f"worker {' '.join(chunk)}")


def needed_sides(candidates: Sequence[Candidate]) -> list[str]:
    keys: list[str] = []

    def need(key: str) -> None:
        side = SIDE[key]
        if side.against:
            need(side.against)
        if key not in keys:
            keys.append(key)

    for candidate in candidates:
        need(candidate.baseline)
        need(candidate.candidate)
    return keys


def record_all(
    candidates: Sequence[Candidate], out: Path, suite_path: Path, jobs: int = 1
) -> float:
    """Record every side the candidates need; a side already recorded is skipped.

    Engines one at a time: MindSpore's CPU attention at 8.6K tokens takes several GiB.
    transformers sides run `jobs` worker processes at once (1 on a shared machine): first
    the sides recorded on their own, then those teacher-forced on them.
    """
    keys = needed_sides(candidates)
    started = time.perf_counter()
    todo = [k for k in keys if not _done(out, k)]
    if any(SIDE[k].engine != "mindformers" for k in todo):
        _wait(_start_worker([], out, suite_path), "making the model variants")
    mindformers = {k for k in keys if SIDE[k].engine == "mindformers"}
    after_mf = [k for k in keys if SIDE[k].against in mindformers]
    transformers = [k for k in keys if SIDE[k].engine == "transformers" and k not in after_mf]
    _run_parallel([k for k in transformers if SIDE[k].against is None], out, suite_path, jobs)
    _run_parallel([k for k in transformers if SIDE[k].against], out, suite_path, jobs)
    _run_worker([k for k in keys if SIDE[k].engine == "vllm" and k not in after_mf], out,
                suite_path)  # fmt: skip
    for key in sorted(mindformers):
        _wait(_start_cli(SIDE[key], out, suite_path), key)
    _run_worker(after_mf, out, suite_path)
    return time.perf_counter() - started


def record_calibration(out: Path, jobs: int = 1) -> float:
    """Record every calibration side on the calibration suite (a side already recorded is
    skipped): the stables first, then the sides teacher-forced on them."""
    suite_path = out / f"{CALIBRATION_SUITE_NAME}.jsonl"
    write_suite(suite_path, calibration_suite())
    started = time.perf_counter()
    if not all(_done(out, s.key) for s in CALIBRATION_SIDES):
        _wait(_start_worker([], out, suite_path), "making the model variants")
    _run_parallel([c.base for c in CALIBRATIONS], out, suite_path, jobs)
    _run_parallel([k for c in CALIBRATIONS for _, _, k in c.pairs if k != c.base], out,
                  suite_path, jobs)  # fmt: skip
    return time.perf_counter() - started


def _prefix(out: Path, key: str, tokens: int, short: int) -> Path:
    source = record_dir(out, key, tokens)
    return prefix_record(source, out / "prefix" / f"{source.name}-{short}", short)


def prefix_record(source: Path, target: Path, short: int) -> Path:
    """A copy of a record holding its first `short` short prompts and all long ones."""
    if (target / MANIFEST).exists():
        return target
    if target.exists():
        shutil.rmtree(target)
    reader = RecordReader(source)
    kept, count = [], 0
    for pid in reader.prompt_ids:
        prompt = reader.get(pid)
        if "long" in prompt.tags:
            kept.append(prompt)
        elif count < short:
            kept.append(prompt)
            count += 1
    with RecordWriter(target, reader.meta) as writer:
        for prompt in kept:
            writer.add(prompt)
    return target


def judge(
    candidate: Candidate,
    out: Path,
    rung: int,
    numbers_only: bool = False,
    tokens: int = MAX_TOKENS,
    *,
    noise: Path | None = None,
) -> dict[str, Any]:
    """`infergate parity compare` on one prefix; its JSON answer, trimmed.

    `numbers_only` allows every fingerprint and config difference: what the numeric
    checks (and the prompt-id hygiene) decide without the fingerprints' help. `tokens`:
    the output tokens both records were made with (part of every cached path). `noise`:
    the baseline's kept noise record (`--noise`): limits k x its noise, as the operator's.
    """
    base = _prefix(out, candidate.baseline, tokens, rung)
    cand = _prefix(out, candidate.candidate, tokens, rung)
    suffix = ("-numbers" if numbers_only else "") + ("-calibrated" if noise else "")
    result = out / "verdicts" / f"{candidate.name}-{tokens}tok-{rung}{suffix}.json"
    argv = ["parity", "compare", str(base), str(cand), "--profile", candidate.profile]
    if numbers_only:
        argv += ["--allow-config-diff", "*"]
    if noise is not None:
        argv += ["--noise", str(noise)]
    code = None
    if not (REUSE_VERDICTS and result.exists()):  # records are written once: so are verdicts
        with redirect_stdout(StringIO()):
            code = infergate_main([*argv, "--json", str(result)])
    document = json.loads(result.read_text())
    verdict = document.get("verdict") or {}
    reasons = verdict.get("reasons") or document.get("reasons") or []
    checks = verdict.get("checks") or []
    return {
        "prompts": rung,
        "status": document.get("status"),
        "exit": code,
        "reasons": reasons,
        "failing": [c["key"] for c in checks if c.get("outcome") == "fail"],
        "inconclusive": [c["key"] for c in checks if c.get("outcome") == "inconclusive"],
        "hygiene": [_hygiene_key(r) for r in reasons if r.startswith("hygiene")],
        "closest": closest_check(checks),
    }


REUSE_VERDICTS = os.environ.get("GATE_BENCH_REJUDGE") != "1"
"""Verdicts already written are reused (a record and its prefixes are written once);
GATE_BENCH_REJUDGE=1 judges again, e.g. after the parity core changed."""

EVIDENCE_KEYS = ("minPrompts", "minLongPrompts", "minScoredSteps")


def _hygiene_key(reason: str) -> str:
    """'hygiene FingerprintDiffers (both): model_config.rope_theta: 1e6 ...' -> the key."""
    kind = reason.split()[1] if len(reason.split()) > 1 else "hygiene"
    detail = reason.split(": ", 1)[1] if ": " in reason else ""
    key = detail.split(":", 1)[0].strip()
    if kind == "ConfigDiffers":
        key = "config " + detail.removeprefix("effective config differs: ").split(":", 1)[0]
    return f"{kind} {key}".strip()


def closest_check(checks: Sequence[dict[str, Any]]) -> str | None:
    """The passing threshold check nearest its limit: its key, bound and limit.

    Nearness is the bound's share of the limit's distance from a perfect value (0 for
    errors, 1 for rates and cosines); evidence counts are left out.
    """
    best: tuple[float, str] | None = None
    for check in checks:
        limit, op = check.get("threshold"), check.get("op")
        if check.get("outcome") != "pass" or check["key"] in EVIDENCE_KEYS or limit is None:
            continue
        side = "upper" if op == "<=" else "lower"
        bound = check.get(side) if check.get(side) is not None else check.get("value")
        value = check.get("value")
        if bound is None or value in (0.0, 1.0):  # a perfect observation: no margin to show
            continue
        if op == "<=" and limit > 0:
            share = abs(float(bound)) / float(limit)
        elif op == ">=" and limit < 1:  # rates and cosines: 1 is perfect
            share = (1.0 - float(bound)) / (1.0 - float(limit))
        else:  # counts (a fork position), or a limit at perfection (strict)
            continue
        if best is None or share > best[0]:
            shown = f"{check['key']} {side} {float(bound):.4g} vs {float(limit):.4g}"
            best = (share, f"{shown} ({share:.0%} of the limit)")
    return None if best is None else best[1]


def correct(candidate: Candidate, status: str | None) -> bool:
    return status == ("Failed" if candidate.kind == H else "Passed")


def _prefix_job(job: tuple[Path, str, int, int]) -> None:
    _prefix(*job)


def _judge_job(job: tuple[Candidate, Path, int, bool, int, Path | None]) -> dict[str, Any]:
    return judge(*job[:5], noise=job[5])


@functools.cache
def _kept_record(path: Path) -> dict[str, Any]:
    """A noise record as written (read once: every row of its stable asks for it)."""
    record: dict[str, Any] = json.loads(path.read_text())
    return record


def calibration_for(candidate: Candidate, kept: dict[str, Path]) -> tuple[Path | None, str]:
    """The noise record a row is judged with, or None and why its limits stay static.

    A record stands for one stable: the row's baseline must be the side it was kept for,
    and its dtype and engine the baseline's (never a record forced onto another stable).
    """
    side = SIDE.get(candidate.baseline)
    path = kept.get(candidate.baseline)
    if side is None or path is None:
        if side is None:
            return None, f"static: no noise kept for {candidate.baseline}"
        model = "" if side.model == "base" else f", model {side.model}"
        return None, f"static: no noise kept for {side.key} ({side.engine} {side.dtype}{model})"
    noise = _kept_record(path)
    if (noise["dtype"], noise["engine"]) != (side.dtype, side.engine):
        return None, (
            f"static: the kept record is of {noise['engine']} {noise['dtype']}, the baseline "
            f"{side.engine} {side.dtype}"
        )
    return path, f"{path.name}"


def calibration_noise(out: Path) -> dict[str, Path]:
    """Each stable's noise record, as a team keeps it: `infergate parity calibrate --pair
    ... --noise-out` on its calibration pairs (written once; GATE_BENCH_REJUDGE=1: again)."""
    folder = out / "calibration"
    kept: dict[str, Path] = {}
    for calibration in CALIBRATIONS:
        path = folder / calibration.file
        if not (REUSE_VERDICTS and path.exists()):
            argv = ["parity", "calibrate"]
            for label, base, cand in calibration.pairs:
                argv += ["--pair", f"{label}={record_dir(out, base)}:{record_dir(out, cand)}"]
            report = folder / f"{path.stem}-pairs.json"
            argv += ["--noise-out", str(path), "--json", str(report)]
            with redirect_stdout(StringIO()):
                code = infergate_main(argv)
            if code != 0:
                raise RuntimeError(f"parity calibrate for {calibration.baseline}: exit {code}")
        kept[calibration.baseline] = path
    return kept


def noise_figures(path: Path) -> dict[str, Any]:
    """A kept record's figures per pair: mean KL and same-top miss, observed and bound."""
    noise = _kept_record(path)
    tables = {"self (A/A)": noise["selfNoise"], **noise.get("changes", {})}
    figures: dict[str, Any] = {}
    for name, table in tables.items():
        figures[name] = {
            family: {
                "observed": table[family].get("observed"),
                "upper": table[family]["upper"],
                "pairs": table[family]["pairs"],
            }
            for family in ("klMean", "sameTopMiss", "forkMargin", "hiddenRelL2P99")
            if family in table
        }
    return {
        "file": path.name, "dtype": noise["dtype"], "engine": noise["engine"],
        "layers": noise["layers"], "prompts": noise["prompts"], "method": noise["method"],
        "figures": figures,
    }  # fmt: skip


def calibration_meta(kept: dict[str, Path], seconds: float, results: Path) -> dict[str, Any]:
    """The calibration's suite and figures for the table; its records copied to `results`."""
    suite = calibration_suite()
    results.mkdir(parents=True, exist_ok=True)
    for path in kept.values():
        shutil.copyfile(path, results / path.name)
    return {
        "suite": suite.name,
        "digest": suite.digest(),
        "short": len(suite.select(long=False).prompts),
        "long": len(suite.select(long=True).prompts),
        "recordSeconds": seconds,
        "records": {stable: noise_figures(path) for stable, path in kept.items()},
    }


def evaluate(
    candidates: Sequence[Candidate], out: Path, jobs: int = 1, kept: dict[str, Path] | None = None
) -> list[dict[str, Any]]:
    from concurrent.futures import ProcessPoolExecutor

    # Over the whole bench as well (candidates of other runs share its sides' counts).
    tokens = side_tokens([*CANDIDATES, *(c for c in candidates if c not in CANDIDATES)])
    sides = sorted({k for c in candidates for k in (c.baseline, c.candidate)})
    prefix_jobs = [(out, k, tokens[k], n) for k in sides for n in LADDER]
    judge_jobs: list[tuple[Candidate, Path, int, bool, int, Path | None]] = [
        (c, out, n, False, tokens[c.baseline], None) for c in candidates for n in LADDER
    ]
    judge_jobs += [(c, out, LADDER[-1], True, tokens[c.baseline], None) for c in candidates]
    noise = {c.name: calibration_for(c, kept or {}) for c in candidates}
    calibrated = [c for c in candidates if noise[c.name][0] is not None]
    judge_jobs += [
        (c, out, LADDER[-1], False, tokens[c.baseline], noise[c.name][0]) for c in calibrated
    ]
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            list(pool.map(_prefix_job, prefix_jobs))
            judged = list(pool.map(_judge_job, judge_jobs))
    else:
        judged = [_judge_job(j) for j in judge_jobs]
    rows = []
    numbers = judged[len(candidates) * len(LADDER) : len(candidates) * (len(LADDER) + 1)]
    with_noise = dict(
        zip(
            (c.name for c in calibrated), judged[len(candidates) * (len(LADDER) + 1) :], strict=True
        )
    )
    for index, candidate in enumerate(candidates):
        rungs = judged[index * len(LADDER) : (index + 1) * len(LADDER)]
        needed = next(
            (r["prompts"] for r in rungs if r["status"] in ("Passed", "Failed")
             and correct(candidate, r["status"])),
            None,
        )  # fmt: skip
        final = rungs[-1]
        again = with_noise.get(candidate.name, final)
        rows.append(
            {
                "name": candidate.name,
                "kind": candidate.kind,
                "change": candidate.change,
                "baseline": candidate.baseline,
                "candidate": candidate.candidate,
                "profile": candidate.profile,
                "maxTokens": tokens[candidate.baseline],
                "verdict": final["status"],
                "correct": correct(candidate, final["status"]),
                "reasons": final["reasons"],
                "failing": final["failing"],
                "inconclusive": final["inconclusive"],
                "hygiene": final["hygiene"],
                "closest": final["closest"],
                "numbersOnly": {
                    "status": numbers[index]["status"],
                    "failing": numbers[index]["failing"],
                    "inconclusive": numbers[index]["inconclusive"],
                    "closest": numbers[index]["closest"],
                },
                "promptsNeeded": needed,
                "ladder": [{"prompts": r["prompts"], "status": r["status"]} for r in rungs],
                "calibrated": {
                    "limits": noise[candidate.name][1],
                    "status": again["status"],
                    "correct": correct(candidate, again["status"]),
                    "reasons": again["reasons"],
                    "failing": again["failing"],
                    "inconclusive": again["inconclusive"],
                    "hygiene": again["hygiene"],
                    "closest": again["closest"],
                },
            }
        )
        _log(f"{candidate.name}: {final['status']} ({'ok' if rows[-1]['correct'] else 'WRONG'})")
    return rows


def merge_rows(
    rows: Sequence[dict[str, Any]], previous: dict[str, Any] | None, date: str
) -> list[dict[str, Any]]:
    """This run's rows, and every other candidate's row as the last table had it.

    A run of some candidates (--only, GATE_BENCH_ONLY) leaves the rest of the table as it
    was: those rows keep the date of the run that made them (`run`), and the table names
    them. In the bench's order; a row of a candidate no longer in the bench is dropped.
    """
    fresh = {r["name"]: {**r, "run": date} for r in rows}
    old_date = (previous or {}).get("meta", {}).get("date")
    older = {
        r["name"]: {**r, "run": r.get("run", old_date)} for r in (previous or {}).get("rows", [])
    }
    merged = []
    for candidate in CANDIDATES:
        row = fresh.get(candidate.name) or older.get(candidate.name)
        if row is not None:
            merged.append(row)
    merged += [r for name, r in fresh.items() if name not in {c.name for c in CANDIDATES}]
    return merged


def _numbers(row: dict[str, Any]) -> str:
    only = row["numbersOnly"]
    if only["status"] == "Passed":
        return f"Passed (nearest: {only['closest'] or '-'})"
    text = f"{only['status']}: {', '.join(only['failing']) or '-'}"
    if only["inconclusive"]:
        text += f" (inconclusive: {', '.join(only['inconclusive'])})"
    return text


def _deciding(row: dict[str, Any]) -> str:
    if row["verdict"] == "Passed":
        return f"passed; nearest: {row['closest'] or '-'}"
    parts = []
    if row["hygiene"]:
        parts.append("hygiene: " + "; ".join(dict.fromkeys(row["hygiene"])))
    if row["failing"]:
        parts.append("failed: " + ", ".join(row["failing"]))
    if row["inconclusive"]:
        parts.append("inconclusive: " + ", ".join(row["inconclusive"]))
    return " / ".join(parts) or _short_reason(row["reasons"])


def _short_reason(reasons: Sequence[str]) -> str:
    if not reasons:
        return "(none)"
    text = "; ".join(r.split(" [worst")[0] for r in reasons[:2])
    text = text.replace("|", "/")
    more = f" (+{len(reasons) - 2} more)" if len(reasons) > 2 else ""
    return (text[:220] + "…" if len(text) > 220 else text) + more


def to_markdown(rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    wrong = [r for r in rows if not r["correct"]]
    harmful = [r for r in rows if r["kind"] == H]
    benign = [r for r in rows if r["kind"] == B]
    lines = [
        "# Gate-quality benchmark",
        "",
        (
            f"`make gate-bench` on {meta['date']}: fixture `{GENERATOR_VERSION}`, suite "
            f"`{SUITE_NAME}` ({meta['short']} short prompts x {MAX_TOKENS} output tokens, or "
            "as many as the candidate's profile needs to judge its fork rule (column tokens), "
            f"{meta['long']} prompts of 8K+ tokens x {LONG_MAX_TOKENS}), greedy, "
            f"top-{TOP_LOGPROBS} logprobs, "
            "candidates teacher-forced on their baseline. Ladder "
            f"{'/'.join(str(n) for n in LADDER)} short prompts (each with the long ones). "
            f"Recording took {meta['recordSeconds'] / 60:.1f} min, judging "
            f"{meta['judgeSeconds'] / 60:.1f} min, on a 2-core machine shared with other work."
        ),
        "",
        (
            f"**{sum(r['correct'] for r in harmful)}/{len(harmful)} harmful blocked, "
            f"{sum(r['correct'] for r in benign)}/{len(benign)} benign passed.**"
        ),
        "",
        (
            "| candidate | kind | change | profile | tokens | verdict (64) | correct | "
            "prompts needed | "
            "ladder 8/16/32/64 | deciding metric (failed checks; or the passing check "
            "nearest its limit) | numbers only (64): verdict, failed checks |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ladder = "/".join((x["status"] or "?")[0] for x in r["ladder"])
        needed = "-" if r["promptsNeeded"] is None else f"{r['promptsNeeded']}+{meta['long']}"
        cells = [
            r["name"], r["kind"], r["change"], r["profile"], r.get("maxTokens", MAX_TOKENS),
            r["verdict"],
            "yes" if r["correct"] else "**no**", needed, ladder, _deciding(r), _numbers(r),
        ]  # fmt: skip
        # A `|` inside a cell (a token like <|endoftext|>) would split the row.
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    lines += [
        "",
        (
            "Numbers only: the same comparison with every fingerprint and config difference "
            "allowed (`--allow-config-diff '*'`), i.e. what the numeric checks and the prompt-id "
            "hygiene decide if the fingerprints had not seen the change."
        ),
    ]
    carried = [r for r in rows if r.get("run", meta["date"]) != meta["date"]]
    if carried:
        lines += [
            "",
            (
                "Not run again on "
                + meta["date"]
                + " (rows as an earlier run left them): "
                + ", ".join(f"{r['name']} ({r['run']})" for r in carried)
                + "."
            ),
        ]
    lines += ["", f"Wrong rows: {', '.join(r['name'] for r in wrong) or 'none'}.", ""]
    lines += _calibrated_markdown(rows, meta)
    lines += ["## Reasons at 64 prompts", ""]
    lines += [f"- **{r['name']}** ({r['verdict']}): {_short_reason(r['reasons'])}" for r in rows]
    return "\n".join(lines) + "\n"


def _calibrated_markdown(rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> list[str]:
    """The rows judged a second time with the baseline's kept noise (`--noise`)."""
    judged = [r for r in rows if "calibrated" in r]
    if not judged:
        return []
    calibration = meta.get("calibration", {})
    harmful = [r for r in judged if r["kind"] == H]
    benign = [r for r in judged if r["kind"] == B]
    wrong = [r["name"] for r in judged if not r["calibrated"]["correct"]]
    lines = [
        "## Calibrated limits (`parity compare --noise`)",
        "",
        (
            "Every row judged again at 64 prompts with the noise record a platform team keeps "
            "for the row's stable (`infergate parity calibrate --pair ... --noise-out`), the "
            "limits derived as the operator derives them (k x noise, k = 3, k^2 = 9 for KL and "
            "1 - cosine: `parity.calibrated`). The pairs are recorded on a calibration suite "
            f"of its own (`{calibration.get('suite', CALIBRATION_SUITE_NAME)}`, "
            f"{calibration.get('short', '?')} short prompts + {calibration.get('long', '?')} "
            "long ones, none of the bench suite's: `calibration_suite`), the calibration sides "
            f"in {calibration.get('recordSeconds', 0) / 60:.1f} min. Rows whose stable has no "
            "kept record keep the static limits (column limits says why); the static column "
            "above is unchanged."
        ),
        "",
        (
            f"**Calibrated: {sum(r['calibrated']['correct'] for r in harmful)}/{len(harmful)} "
            f"harmful blocked, {sum(r['calibrated']['correct'] for r in benign)}/{len(benign)} "
            "benign passed.**"
        ),
        "",
        (
            "| candidate | kind | profile | baseline | static verdict (64) | limits | calibrated "
            "verdict (64) | correct | deciding metric (calibrated) |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in judged:
        cal = r["calibrated"]
        cells = [
            r["name"], r["kind"], r["profile"], r["baseline"], r["verdict"], cal["limits"],
            cal["status"], "yes" if cal["correct"] else "**no**",
            _deciding({**cal, "verdict": cal["status"]}),
        ]  # fmt: skip
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    lines += ["", f"Wrong rows (calibrated): {', '.join(wrong) or 'none'}.", ""]
    lines += [
        "### The kept noise",
        "",
        (
            "Per record and pair: observed value and the one-sided 95% upper bound `parity "
            "calibrate` keeps (the core's own estimates, each prompt weighing the same: "
            "`calibration.noise.core_bounds`), the figures the limits are k x."
        ),
        "",
        (
            "| stable | record | pair | mean KL | mean KL upper | same-top miss | same-top miss "
            "upper | fork margin upper |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]

    def fig(table: dict[str, Any], family: str, key: str) -> str:
        value = table.get(family, {}).get(key)
        return "-" if value is None else f"{value:.3g}"

    for stable, record in calibration.get("records", {}).items():
        for pair, table in record["figures"].items():
            cells = [
                stable, f"{record['file']} ({record['engine']} {record['dtype']})",
                f"{pair}: {', '.join(table.get('klMean', {}).get('pairs', []))}",
                fig(table, "klMean", "observed"), fig(table, "klMean", "upper"),
                fig(table, "sameTopMiss", "observed"), fig(table, "sameTopMiss", "upper"),
                fig(table, "forkMargin", "upper"),
            ]  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "### Reasons at 64 prompts (calibrated)", ""]
    lines += [
        f"- **{r['name']}** ({r['calibrated']['status']}): "
        f"{_short_reason(r['calibrated']['reasons'])}"
        for r in judged
    ]
    return [*lines, ""]


def _spent(out: Path, now: dict[str, float]) -> dict[str, float]:
    """Recording seconds by the rows recorded (and the calibration), runs added up."""
    seconds = out / "timings" / "record-seconds.json"
    seconds.parent.mkdir(parents=True, exist_ok=True)
    spent: dict[str, float] = json.loads(seconds.read_text()) if seconds.exists() else {}
    for key, value in now.items():
        spent[key] = round(spent.get(key, 0.0) + value, 1)
    seconds.write_text(json.dumps(spent, indent=1) + "\n")
    return spent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", default="bench", choices=("bench", "worker"))
    parser.add_argument("--keys", nargs="*", default=[], help="worker: side keys to record")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "gate-bench")
    parser.add_argument("--suite", type=Path, default=None)
    parser.add_argument("--only", nargs="*", default=None, help="candidate names")
    parser.add_argument("--results", type=Path, default=REPO / "experiments")
    parser.add_argument(
        "--engines", nargs="*", default=["transformers", "vllm", "mindformers"],
        help="only candidates whose sides all run on these engines",
    )  # fmt: skip
    parser.add_argument(
        "--jobs", type=int, default=1,
        help="worker processes at once (transformers records, judging); 1 on a shared machine",
    )  # fmt: skip
    parser.add_argument("--threads", type=int, default=None, help="worker: torch threads")
    parser.add_argument(
        "--record-only", action="store_true",
        help="record the sides and stop (judge later: no engine runs then)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    suite_path = args.suite or args.out / f"{SUITE_NAME}.jsonl"
    if args.mode == "worker":
        worker(args.keys, args.out, suite_path, args.threads)
        return 0
    only = args.only
    if only is None and os.environ.get("GATE_BENCH_ONLY"):
        only = [n for n in os.environ["GATE_BENCH_ONLY"].replace(",", " ").split() if n]
    unknown = sorted(set(only or ()) - {c.name for c in CANDIDATES})
    if unknown:
        parser.error(f"no such candidate: {', '.join(unknown)}")
    candidates = [
        c for c in CANDIDATES
        if (only is None or c.name in only)
        and all(SIDE[k].engine in args.engines for k in needed_sides([c]))
    ]  # fmt: skip
    suite = write_suite(suite_path)
    record_seconds = record_all(candidates, args.out, suite_path, args.jobs)
    spent = _spent(
        args.out,
        {
            ",".join(c.name for c in candidates): record_seconds,
            "calibration": record_calibration(args.out, args.jobs),
        },
    )
    if args.record_only:
        return 0
    record_seconds = sum(v for k, v in spent.items() if k != "calibration")
    started = time.perf_counter()
    kept = calibration_noise(args.out)
    rows = evaluate(candidates, args.out, args.jobs, kept)
    date = time.strftime("%Y-%m-%d")
    previous_path = args.results / "gate_bench.json"
    previous = json.loads(previous_path.read_text()) if previous_path.exists() else None
    rows = merge_rows(rows, previous, date)
    meta = {
        "date": date,
        "rerun": [c.name for c in candidates],
        "short": len(suite.select(long=False).prompts),
        "long": len(suite.select(long=True).prompts),
        "recordSeconds": round(record_seconds, 1),
        "judgeSeconds": round(time.perf_counter() - started, 1),
        "timings": [
            json.loads(p.read_text()) for p in sorted((args.out / "timings").glob("worker-*"))
        ],
    }
    meta["calibration"] = calibration_meta(kept, spent["calibration"], args.results)
    markdown = to_markdown(rows, meta)
    document = {"meta": meta, "rows": rows}
    for folder in (args.out, args.results):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "gate_bench.json").write_text(json.dumps(document, indent=1) + "\n")
    (args.results / "GATE_BENCH.md").write_text(markdown)
    (args.out / "GATE_BENCH.md").write_text(markdown)
    print(markdown)  # noqa: T201 - the table is the benchmark's output
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
