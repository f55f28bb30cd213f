"""A calibration as the noise record a golden store keeps (`parity.calibrated.ModelNoise`).

A pair of two records of one dtype is self noise (the same configuration again, at
another batch size or concurrency); a pair across dtypes is the noise of that expected
change on the same weights, kept as `dtype <candidate dtype>`. Each family takes the
worst pair of its kind. A check that Passed under profile dtype-change on one set of
weights is such a pair too (`change_pair_refusal`, `change_noise`): the runner keeps it
in the candidate's record as `dtype <baseline dtype>`. Pure: the reports in, the record out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from infergate.calibration.noise import pair_report
from infergate.parity.calibrated import ENVELOPE_FAMILIES, FamilyNoise, ModelNoise, NoiseFamily
from infergate.parity.noise_families import family_noise
from infergate.parity.record import RecordMeta
from infergate.parity.thresholds import DEFAULT_CONFIDENCE

WEIGHTS_DIGEST: Final = "weights.digest"
"""The fingerprint naming the weight tensors' content (`runtime.fingerprints`)."""


def change_key(dtype: str) -> str:
    """The key of the expected change to `dtype` in `ModelNoise.changes` (`dtype float32`),
    as `parity.calibrated` looks it up."""
    return f"dtype {dtype}"


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
            changes.setdefault(change_key(str(report["candidate"]["dtype"])), []).append(report)
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


def change_pair_refusal(
    baseline: RecordMeta, candidate: RecordMeta, confidence: float | None
) -> str | None:
    """Why two sides a check compared are not the same weights under two dtypes, and so
    not the expected-change pair a calibration keeps (None: they are).

    The same weights (both sides report `weights.digest`, equal), two known dtypes, and
    nothing else that changes numerics: the same engine, version and `versions.*`.
    `confidence` is the check's: its bounds are the noise, and a calibration bounds at
    the default level.
    """
    weights = [m.fingerprints.get(WEIGHTS_DIGEST) for m in (baseline, candidate)]
    if None in weights:
        side = "baseline" if weights[0] is None else "candidate"
        return f"the {side} reports no {WEIGHTS_DIGEST}: the same weights are not shown"
    if weights[0] != weights[1]:
        return f"the weights differ ({WEIGHTS_DIGEST} {weights[0]} / {weights[1]})"
    dtypes = (baseline.dtype, candidate.dtype)
    if baseline.dtype == candidate.dtype or "unknown" in dtypes:
        return f"the dtypes are {dtypes[0]} / {dtypes[1]}, not two known dtypes"
    engines = [(m.engine, m.engine_version, _versions(m)) for m in (baseline, candidate)]
    if engines[0] != engines[1]:
        return (
            f"the engines differ ({baseline.engine} {baseline.engine_version} / "
            f"{candidate.engine} {candidate.engine_version}, or their versions.*): the pair "
            "measures more than the dtype"
        )
    if (confidence or DEFAULT_CONFIDENCE) != DEFAULT_CONFIDENCE:
        return f"the check bounds at confidence {confidence}, a calibration at {DEFAULT_CONFIDENCE}"
    return None


def _versions(meta: RecordMeta) -> dict[str, Any]:
    return {
        k: v
        for k, v in meta.fingerprints.items()
        if k.startswith("versions.") or k == "engine.kind"
    }


def change_noise(
    label: str, result: Mapping[str, Any], signed: Sequence[Mapping[str, float | None]] = ()
) -> dict[NoiseFamily, FamilyNoise]:
    """The noise of an expected-change pair from its parity result (camelCase JSON), by
    the calibration's own path (`pair_report`, `family_noise`), in the families that
    compare the two sides' outputs (`ENVELOPE_FAMILIES`). The decode families are left
    out: they measure the candidate's decode against its own prefill, here the other
    dtype's, so a later check whose candidate runs this pair's baseline dtype would be
    judged by the wrong side's decode path; their static limits stand.
    """
    families = family_noise([pair_report(label, result, signed)])
    return {k: v for k, v in families.items() if k in ENVELOPE_FAMILIES}
