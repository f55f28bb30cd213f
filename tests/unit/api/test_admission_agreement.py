"""The models' side of the admission table (admission_cases.py): every bad input refused and
every good one accepted; tests/integration/test_admission_agreement.py asks the API server
the same questions. Then the threshold ranges, where the CRD and the models must agree."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from infergate.api import ParityCheck
from infergate.api.crd import render_crd_files
from infergate.api.pinned import pinned_flag
from infergate.api.threshold_ranges import (
    NORM_LOG_RATIO_CLIP,
    REGRESSION_RANGES,
    THRESHOLD_RANGES,
    Range,
)
from infergate.parity.hidden import LOG_NORM_RATIO_CLIP
from tests.unit.api.admission_cases import AdmissionCase, admission_cases, models_accept
from tests.unit.api.manifests import example_documents

_CASES = admission_cases()


def test_the_table_holds_bad_and_good_inputs_of_every_kind() -> None:
    names = [case.name for case in _CASES]
    assert len(names) == len(set(names))
    for prefix in ("cpu-", "args-", "threshold-", "regression-", "shadow-"):
        answers = {case.accepted for case in _CASES if case.name.startswith(prefix)}
        assert answers == {True, False}, prefix


@pytest.mark.parametrize("case", _CASES, ids=lambda c: c.name)
def test_the_models_give_the_tables_answer(case: AdmissionCase) -> None:
    assert models_accept(case.document) is case.accepted


@pytest.mark.parametrize(
    ("arg", "flag"),
    [
        ("--load-format=dummy", "--load-format"),
        ("--load_format", "--load-format"),
        ("--hf-config-path", "--hf-config-path"),
        ("--tokenizer", "--tokenizer"),
        ("--tokenizer=x", "--tokenizer"),
        ("--tokenizer_revision=main", "--tokenizer-revision"),
        ("--code-revision", "--code-revision"),
        ("--override-generation-config.temperature=1", "--override-generation-config"),
        ("--trust-remote-code", "--trust-remote-code"),
        ("--trust_remote", "--trust-remote-code"),
    ],
)
def test_flags_that_load_from_elsewhere_are_named_in_the_refusal(arg: str, flag: str) -> None:
    assert pinned_flag(arg) == flag


def test_a_flag_is_matched_to_the_end_of_the_text_as_re2_matches_it() -> None:
    # Python's `$` also matches before a final newline; RE2's (the CRD's) does not. Both now
    # read "--dtype\n" as no pinned flag, and both refuse it for its control character.
    assert pinned_flag("--dtype\n") is None
    assert pinned_flag("--dtype") == "--dtype"


def _spec_properties(file_name: str) -> dict[str, Any]:
    crd = yaml.safe_load(render_crd_files()[file_name])
    spec: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "spec"
    ]["properties"]
    return spec


def _schema_range(prop: dict[str, Any]) -> Range:
    return Range(
        prop["minimum"],
        prop["maximum"],
        low_open=prop.get("exclusiveMinimum", False),
        high_open=prop.get("exclusiveMaximum", False),
    )


@pytest.mark.parametrize(
    ("file_name", "path"),
    [
        ("infergate.io_paritychecks.yaml", ()),
        ("infergate.io_inferencedeployments.yaml", ("rollout", "parity")),
    ],
)
def test_the_crd_bounds_and_describes_every_threshold_as_the_table_says(
    file_name: str, path: tuple[str, ...]
) -> None:
    node = _spec_properties(file_name)
    for key in path:
        node = node[key]["properties"]
    for field, table in (("thresholds", THRESHOLD_RANGES), ("regression", REGRESSION_RANGES)):
        properties = node[field]["properties"]
        for key, allowed in table.items():
            prop = properties[key]
            shown = _schema_range(prop)
            assert (shown.low, shown.high, shown.low_open, shown.high_open) == (
                allowed.low,
                allowed.high,
                allowed.low_open,
                allowed.high_open,
            ), key
            assert f"Allowed: {allowed.text}" in prop["description"], key


@pytest.mark.parametrize(("key", "allowed"), sorted(THRESHOLD_RANGES.items()))
def test_each_threshold_end_is_admitted_as_the_range_says(key: str, allowed: Range) -> None:
    def check(value: float) -> bool:
        document = next(doc for stem, doc in example_documents() if stem == "paritycheck")
        spec = {**document["spec"], "thresholds": {key: value}}
        spec["sampling"] = {**spec["sampling"], "maxTokens": 32768}
        refused = None
        try:
            ParityCheck.model_validate({**document, "spec": spec})
        except ValidationError as error:
            refused = str(error)
        assert refused is None or f"thresholds.{key}" in refused
        return refused is None

    assert check(allowed.low) is not allowed.low_open
    assert check(allowed.high) is not allowed.high_open
    middle = (allowed.low + allowed.high) / 2
    assert check(int(middle) if middle > 1 else middle)  # whole for longPromptTokens


def test_the_refusal_names_the_field_the_value_and_the_range() -> None:
    document = next(doc for stem, doc in example_documents() if stem == "paritycheck")
    spec = {**document["spec"], "thresholds": {"minTokenMatchRate": 0}}
    with pytest.raises(ValidationError) as caught:
        ParityCheck.model_validate({**document, "spec": spec})
    assert "thresholds.minTokenMatchRate: 0 is not allowed; allowed: 0 < x <= 1" in str(
        caught.value
    )


def test_the_norm_ratio_ceiling_is_where_the_measurement_is_clipped() -> None:
    assert NORM_LOG_RATIO_CLIP == LOG_NORM_RATIO_CLIP
