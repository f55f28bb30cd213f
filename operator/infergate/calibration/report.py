"""The calibration as a document: its citation, the pairs' noise, the proposals, as JSON
and as Markdown tables to paste into a note or a profile's source comment."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from infergate import __version__
from infergate.calibration.proposals import propose

_TABLE_PATHS = (
    ("logprobs.meanKl", "mean KL", ".3g"),
    ("logprobs.sameTopRate", "same-top miss", ".3g"),
    ("tokens.matchRate", "fork rate", ".3g"),
    ("hidden.relL2", "hidden relL2 mean", ".3g"),
    ("hidden.relL2P99", "hidden relL2 P99", ".3g"),
    ("hidden.cosineP1", "1 - cosine P1", ".3g"),
    ("hidden.maxAbsErr", "hidden max abs", ".3g"),
    ("signed.hiddenNormRatio", "log norm ratio", ".3g"),
    ("signed.logPerplexityRatio", "log-ppl ratio", ".3g"),
)


def _cell(metric: Mapping[str, Any] | None, spec: str) -> str:
    if metric is None or metric["value"] is None:
        return "-"
    value = metric["value"]
    if metric["noise"] in ("miss", "shortfall"):
        value = 1.0 - value
    text = format(value, spec)
    if metric["upper"] is not None and metric["bounded"]:
        text += f" (≤{format(metric['upper'], spec)})"
    return text


def to_markdown(report: Mapping[str, Any]) -> str:
    """The calibration as a table to paste into a note or a profile's source comment."""
    lines = [f"**Calibrated on**: {report['citation']}", ""]
    head = "| pair | prompts | " + " | ".join(t for _, t, _ in _TABLE_PATHS) + " |"
    lines += [head, "|" + "---|" * (2 + len(_TABLE_PATHS))]
    for pair in report["pairs"]:
        cells = [_cell(pair["noise"].get(p), spec) for p, _, spec in _TABLE_PATHS]
        lines.append(f"| {pair['label']} | {pair['prompts']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        (
            "Values are suite values; (≤x) is the one-sided "
            f"{report['confidence']:.0%} upper bound of the noise (prompt-clustered for means, "
            "Wilson for rates). Miss and fork rates are 1 - rate; cosine as 1 - cosine."
        ),
        "",
        f"**Proposed thresholds** ({report['rule']}):",
        "",
        "| key | proposed | from noise bound | factor | pairs |",
        "|---|---|---|---|---|",
    ]
    for item in report["proposals"]:
        mark = "" if item["inThresholds"] in (None, True) else " (not a key of this core)"
        point = "" if item["bounded"] else " (point value)"
        lines.append(
            f"| {item['key']}{mark} | {item['value']:.3g} | {item['noiseUpper']:.3g}{point} | "
            f"{item['factor']:.3g} | {', '.join(item['from'])} |"
        )
    return "\n".join(lines) + "\n"


def citation(pairs: Sequence[Mapping[str, Any]], model: str, digest: str, date: str) -> str:
    """One line naming what the thresholds were calibrated on."""
    sides = sorted(
        {
            f"{p[s]['engine']} {p[s]['engineVersion']} {p[s]['dtype']}"
            for p in pairs
            for s in ("baseline", "candidate")
        }
    )
    dtypes = sorted({f"{p['baseline']['dtype']}/{p['candidate']['dtype']}" for p in pairs})
    prompts = max((p["prompts"] for p in pairs), default=0)
    return (
        f"model {model}; engines {'; '.join(sides)}; dtype pairs {', '.join(dtypes)}; "
        f"suite {digest} ({prompts} prompts); {date}; infergate {__version__}"
    )


def calibration_document(
    reports: Sequence[Mapping[str, Any]],
    *,
    model: str,
    digest: str,
    date: str,
    confidence: float,
    multiple: float,
    depth: float,
    rule: str,
    known_keys: Iterable[str],
) -> dict[str, Any]:
    """The whole calibration: what it ran on, each pair's noise and the proposals."""
    return {
        "citation": citation(reports, model, digest, date),
        "date": date,
        "confidence": confidence,
        "multiple": multiple,
        "rule": rule,
        "pairs": reports,
        "proposals": propose(reports, multiple, depth, known_keys),
    }
