"""Golden record sizes: measured on real records of the fixture model, projected to a 7B model.

Stores a baseline record and a candidate record (teacher-forced on it) as golden records
under each hidden-state policy (none, summary at 16 and 64 dims, full) and measures the
bytes of every stored file. Then projects the same layout to Qwen2.5-7B at 8K (hidden
3584) with the formula the measurements confirm, and finds the policy that keeps a suite
under a budget. Prints markdown (the figures of experiments/GOLDEN.md).

    PYTHONPATH=operator $VLLM_VENV/bin/python -m infergate.cli record --engine transformers \
        --model ~/.cache/infergate/models/tiny-qwen2-v1 --dtype float32 --suite default \
        --out out/golden/base
    ... --dtype bfloat16 --teacher-forced-from out/golden/base --out out/golden/cand
    .venv/bin/python experiments/golden_sizes.py out/golden/base out/golden/cand
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from infergate.golden.blobs import DirectoryStore
from infergate.golden.entry import GoldenEntry
from infergate.golden.keys import suite_digest
from infergate.golden.policy import FILE_OVERHEAD, StoragePolicy
from infergate.golden.settings import HiddenStatesPolicy
from infergate.golden.store import CheckIdentity, GoldenStore, SideIdentity
from infergate.recordio import RecordReader
from infergate.suite import PromptSpec

MIB = 2**20
POLICIES = (
    ("none", StoragePolicy(HiddenStatesPolicy.NONE, max_bytes=64 << 30)),
    ("summary-16", StoragePolicy(HiddenStatesPolicy.SUMMARY, max_bytes=64 << 30, sketch_dims=16)),
    ("summary-64", StoragePolicy(HiddenStatesPolicy.SUMMARY, max_bytes=64 << 30, sketch_dims=64)),
    ("full", StoragePolicy(HiddenStatesPolicy.FULL, max_bytes=64 << 30)),
)


@dataclass(frozen=True)
class Shape:
    """What one prompt's record holds."""

    prompt_tokens: int
    output_tokens: int
    top_k: int
    hidden: int


def projected_bytes(shape: Shape, policy: str, *, candidate: bool) -> int:
    """Bytes of one prompt of one side: the layout of infergate.recordio plus golden sidecars.

    int64 token ids; top-k ids (int64) and logprobs (float64) per output step; a candidate
    adds teacher-forced ids, target logprobs and its own top-k; hidden states float32.
    Header overhead per file is taken from the fixture measurement (`header`)."""
    p, o, k, h = shape.prompt_tokens, shape.output_tokens, shape.top_k, shape.hidden
    total = 8 * (p + o) + 16 * k * o
    if candidate:
        total += 16 * o + 16 * k * o
    positions = p + o
    if policy == "full":
        total += 4 * positions * h
    elif policy.startswith("summary-"):
        dims = int(policy.split("-")[1])
        total += 4 * positions * (dims + 1)
    return total


def _store_all(base: Path, cand: Path, work: Path) -> dict[str, tuple[GoldenEntry, GoldenEntry]]:
    base_reader, cand_reader = RecordReader(base), RecordReader(cand)
    prompts = tuple(PromptSpec(id=pid, token_ids=(1,)) for pid in base_reader.prompt_ids)
    digest = suite_digest(prompts, {"suite": base_reader.meta.suite})
    out: dict[str, tuple[GoldenEntry, GoldenEntry]] = {}
    for label, policy in POLICIES:
        store = GoldenStore(DirectoryStore(work / label))
        identity = CheckIdentity(
            namespace="llm",
            deployment="fixture",
            check="sizes",
            suite=base_reader.meta.suite,
            suite_digest=digest,
            baseline=SideIdentity("aaaaaaaaaa", "sha256:base", base_reader.meta),
            candidate=SideIdentity("bbbbbbbbbb", "sha256:cand", cand_reader.meta),
        )
        with store.begin(identity, policy) as recording:
            for prompt_id in base_reader.prompt_ids:
                recording.add(base_reader.get(prompt_id), cand_reader.get(prompt_id))
            out[label] = recording.commit()
    return out


def _per_prompt(entry: GoldenEntry) -> dict[str, int]:
    """Bytes per prompt id: its record file plus its summary file."""
    by_index = {f"prompts/{i:06d}.safetensors": p.id for i, p in enumerate(entry.prompts)}
    sizes: dict[str, int] = defaultdict(int)
    for blob in entry.blobs:
        if blob.path in by_index:
            sizes[by_index[blob.path]] += blob.size
    for prompt in entry.prompts:
        if prompt.summary_file:
            sizes[prompt.id] += entry.blob(prompt.summary_file).size
    return sizes


def _fmt(size: float) -> str:
    if size >= MIB:
        return f"{size / MIB:.2f} MiB"
    if size >= 1024:
        return f"{size / 1024:.1f} KiB"
    return f"{size:.0f} B"


LABELS = [label for label, _ in POLICIES]


def _measured(base: Path, cand: Path) -> list[str]:
    base_reader = RecordReader(base)
    hidden_size = next(
        (p.hidden_states.shape[1] for p in base_reader if p.hidden_states is not None), 0
    )
    with tempfile.TemporaryDirectory(prefix="golden-sizes-") as work:
        stored = _store_all(base, cand, Path(work))
    lines = [
        f"## Measured: fixture model (hidden {hidden_size}), suite {base_reader.meta.suite}",
        "",
        "| prompt | tokens (prompt+output) | side | " + " | ".join(LABELS) + " | formula, full |",
        "|---|---|---|" + "---|" * len(LABELS) + "---|",
    ]
    worst_gap = 0.0
    for index, (side, path) in enumerate((("baseline", base), ("candidate", cand))):
        per_policy = {label: _per_prompt(entries[index]) for label, entries in stored.items()}
        kept = {p.id: p.rows for p in stored["full"][index].prompts}
        reader = RecordReader(path)
        for prompt in reader:
            outputs = prompt.output_token_ids.size
            shape = Shape(
                kept[prompt.prompt_id] - outputs, outputs, prompt.top_logprobs.k, hidden_size
            )
            formula = projected_bytes(shape, "full", candidate=index == 1)
            measured = per_policy["full"][prompt.prompt_id]
            worst_gap = max(worst_gap, abs(measured - formula) / measured)
            if "long" in prompt.tags or prompt.prompt_id == reader.prompt_ids[0]:
                cells = " | ".join(_fmt(per_policy[label][prompt.prompt_id]) for label in LABELS)
                tokens = f"{prompt.prompt_token_ids.size}+{outputs}"
                lines.append(
                    f"| {prompt.prompt_id} | {tokens} | {side} | {cells} | {_fmt(formula)} |"
                )
    totals = [sum(entry.size_bytes for entry in stored[label]) for label in LABELS]
    lines += [
        "",
        "| suite total, both sides | " + " | ".join(LABELS) + " |",
        "|---|" + "---|" * len(LABELS),
        f"| {len(base_reader)} prompts | " + " | ".join(_fmt(t) for t in totals) + " |",
        "",
        (
            "Formula (data bytes only) against the measured prompt files: worst gap "
            f"{worst_gap:.1%}; the rest is the safetensors header and prompt text "
            f"({FILE_OVERHEAD} bytes reserved per file)."
        ),
    ]
    return lines


SHORT = Shape(64, 512, 5, 3584)
LONG = Shape(8192, 512, 5, 3584)


def _side_bytes(shape: Shape, label: str, *, candidate: bool) -> int:
    return projected_bytes(shape, label, candidate=candidate) + 2 * FILE_OVERHEAD


def _projected(budget_mib: float) -> list[str]:
    lines = [
        "## Projected: Qwen2.5-7B (hidden 3584, 28 layers, vocab 152K), top-5, per side",
        "",
        "| prompt | side | " + " | ".join(LABELS) + " |",
        "|---|---|" + "---|" * len(LABELS),
    ]
    for name, shape in (("64 + 512 tokens", SHORT), ("8192 + 512 tokens", LONG)):
        for side, candidate in (("baseline", False), ("candidate", True)):
            cells = " | ".join(
                _fmt(_side_bytes(shape, label, candidate=candidate)) for label in LABELS
            )
            lines.append(f"| {name} | {side} | {cells} |")
    suites = {
        "16 short + 4 x 8K": [(SHORT, 16), (LONG, 4)],
        "100 x 8K": [(LONG, 100)],
    }
    budget = budget_mib * MIB
    lines += [
        "",
        "| suite (baseline side) | "
        + " | ".join(LABELS)
        + f" | largest under {budget_mib:g} MiB |",
        "|---|" + "---|" * len(LABELS) + "---|",
    ]
    for name, parts in suites.items():
        sizes = [
            sum(_side_bytes(shape, label, candidate=False) * count for shape, count in parts)
            for label in LABELS
        ]
        fits = [label for label, size in zip(LABELS, sizes, strict=True) if size <= budget]
        cells = " | ".join(_fmt(size) for size in sizes)
        lines.append(f"| {name} | {cells} | {fits[-1] if fits else '-'} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("baseline", type=Path)
    parser.add_argument("candidate", type=Path)
    parser.add_argument("--budget-mib", type=float, default=100.0)
    args = parser.parse_args(argv)
    lines = [*_measured(args.baseline, args.candidate), "", *_projected(args.budget_mib)]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
