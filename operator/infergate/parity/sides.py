"""The two sides before any prompt: can they be compared, and what differs between them.

Both must have run the same suite (by content digest, else by name) and the same run
settings (fingerprints `suite.*`, `sampling.*`): otherwise the comparison is invalid, an
Error. A config or fingerprint difference the profile does not expect, or a fingerprint
on one side only, is a hygiene failure naming the key and both values (`HygieneLog`);
what the profile expects to differ, and what could not be compared, is noted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from infergate.parity.fingerprints import RUN_GROUPS, compare_fingerprints
from infergate.parity.hygiene import HygieneLog, config_differences
from infergate.parity.metrics import HygieneCheck, SideInfo
from infergate.parity.record import RecordMeta


@dataclass
class SideChecks:
    """What the side checks found beside hygiene: errors (the check is invalid) and notes."""

    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def check_sides(
    baseline: RecordMeta, candidate: RecordMeta, allowed: Iterable[str], hygiene: HygieneLog
) -> SideChecks:
    """Suite, model, config and fingerprints of the two sides; `allowed`: the fnmatch
    patterns of config and fingerprint keys the profile expects to differ."""
    found = SideChecks()
    expected = tuple(allowed)
    _check_suite(baseline, candidate, found)
    if baseline.model != candidate.model:
        found.notes.append(f"model names differ: {baseline.model!r} / {candidate.model!r}")
    _check_config(baseline, candidate, expected, hygiene, found)
    _check_fingerprints(baseline, candidate, expected, hygiene, found)
    return found


def _check_suite(baseline: RecordMeta, candidate: RecordMeta, found: SideChecks) -> None:
    a = baseline.fingerprints.get("suite.digest")
    b = candidate.fingerprints.get("suite.digest")
    if a is not None and b is not None:
        if baseline.suite != candidate.suite:
            found.notes.append(
                f"suite names differ ({baseline.suite!r} / {candidate.suite!r}); "
                "compared by content digest"
            )
        return  # digests are compared with the other run fingerprints
    if baseline.suite != candidate.suite:
        found.errors.append(
            f"suites differ: baseline ran {baseline.suite!r}, candidate ran "
            f"{candidate.suite!r}; both sides must run the same suite"
        )
    found.notes.append("suite content digest not recorded: suites compared by name only")


def _check_config(
    baseline: RecordMeta,
    candidate: RecordMeta,
    allowed: Iterable[str],
    hygiene: HygieneLog,
    found: SideChecks,
) -> None:
    differing, one_sided = config_differences(
        baseline.effective_config, candidate.effective_config, allowed
    )
    if differing:
        detail = "effective config differs: " + "; ".join(differing)
        hygiene.flag(HygieneCheck.CONFIG_DIFFERS, "both", detail)
    if one_sided:
        found.notes.append(
            "pinned config keys on one side only (compared through the fingerprints' "
            "model_config.* where both sides report it): " + ", ".join(one_sided)
        )


def _check_fingerprints(
    baseline: RecordMeta,
    candidate: RecordMeta,
    expected: Iterable[str],
    hygiene: HygieneLog,
    found: SideChecks,
) -> None:
    a, b = baseline.fingerprints, candidate.fingerprints
    if not a and not b:
        found.notes.append(
            "no fingerprints recorded on either side: tokenizer, chat template, generation "
            "config, weights, loaded model config and versions were not compared"
        )
        return
    compared = compare_fingerprints(a, b, expected)
    for diff in compared.run_differences:
        found.errors.append(
            f"the two sides did not run the same check: {diff.describe()}; the runner "
            "must give both the same suite and sampling"
        )
    for diff in compared.differing:
        hygiene.flag(HygieneCheck.FINGERPRINT_DIFFERS, "both", diff.describe())
    for key, side in compared.one_sided:
        if key.startswith(RUN_GROUPS):
            found.errors.append(f"fingerprint {key} recorded by the {side} only")
            continue
        other = "candidate" if side == "baseline" else "baseline"
        hygiene.flag(
            HygieneCheck.FINGERPRINT_MISSING,
            "both",
            f"{key}: {_value(a.get(key, b.get(key)))} on the {side}, absent on the {other}",
        )
    if compared.expected:
        found.notes.append(
            "expected differences under this profile: "
            + "; ".join(d.describe() for d in compared.expected)
        )


def _value(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def run_keys(a: Mapping[str, object], b: Mapping[str, object]) -> dict[str, object]:
    """The run fingerprints both sides agree on: what makes two checks comparable."""
    keys = {k for k in a if k.startswith(RUN_GROUPS)} & {k for k in b if k.startswith(RUN_GROUPS)}
    return {k: a[k] for k in sorted(keys) if a[k] == b[k]}


def side_info(meta: RecordMeta) -> SideInfo:
    """What the result says of one side."""
    return SideInfo(
        engine=meta.engine,
        engine_version=meta.engine_version,
        dtype=meta.dtype,
        config_hash=meta.config_hash,
        model=meta.model,
        suite=meta.suite,
        fingerprints=dict(meta.fingerprints),
    )
