"""A calibration as the noise record a golden store keeps (`parity.calibrated.ModelNoise`).

A pair of two records of one dtype is self noise (the same configuration again, at
another batch size or concurrency); a pair across dtypes is the noise of that expected
change on the same weights, kept as `dtype <candidate dtype>`. Each family takes the
worst pair of its kind. Pure: the reports in, the record out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from infergate.parity.calibrated import ModelNoise
from infergate.parity.noise_families import family_noise


def model_noise(
    reports: Sequence[Mapping[str, Any]],
    *,
    revision: str | None,
    digest: str,
    measured: str,
    method: str,
) -> ModelNoise:
    """The noise record of a calibration's pair reports (`calibration.noise.pair_report`)."""
    if not reports:
        raise ValueError("no pairs: a noise record needs at least one measured pair")
    selves = [r for r in reports if r["baseline"]["dtype"] == r["candidate"]["dtype"]]
    changes: dict[str, list[Mapping[str, Any]]] = {}
    for report in reports:
        if report["baseline"]["dtype"] != report["candidate"]["dtype"]:
            changes.setdefault(f"dtype {report['candidate']['dtype']}", []).append(report)
    first = selves[0] if selves else reports[0]
    layers = {r.get("layers") for r in reports}
    depth = layers.pop() if len(layers) == 1 else None
    return ModelNoise(
        revision=revision,
        model=str(first["baseline"]["model"]),
        engine=str(first["baseline"]["engine"]),
        dtype=str(first["baseline"]["dtype"]),
        layers=depth if isinstance(depth, int) else None,
        suite_digest=digest,
        prompts=max(int(r["prompts"]) for r in reports),
        measured=measured,
        method=method,
        self_noise=family_noise(selves),
        changes={change: family_noise(pairs) for change, pairs in changes.items()},
    )
