"""What we ship as YAML is written out in full: no anchors or aliases (`&id001`,
`*id001`), which some tools that read CRDs and charts refuse. Checked on the parser's
events, not on text, for the checked-in files, for what the chart renders, and for what
both generators write when one value is met twice."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from infergate.api.crd import render_crd_files
from infergate_dev.helmchart import render_chart
from tests.tools import REPO
from tests.unit.packaging.kustomize import MANIFESTS, build
from tests.unit.packaging.test_helm_chart import CHART, helm

# Chart templates hold Go template actions and are not YAML until helm renders them.
_PLAIN_FILES = sorted(
    p
    for p in [*(REPO / "crds").glob("*.yaml"), *CHART.rglob("*.yaml")]
    if "templates" not in p.relative_to(CHART if p.is_relative_to(CHART) else REPO).parts
)


def anchors(text: str) -> list[str]:
    """Every anchor or alias the YAML stream names, as `&name` / `*name`."""
    found: list[str] = []
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            found.append(("*" if isinstance(event, yaml.AliasEvent) else "&") + anchor)
    return found


def test_the_scan_sees_an_anchor_and_its_alias() -> None:
    assert anchors("a: &id001 [x]\nb: *id001\n") == ["&id001", "*id001"]


@pytest.mark.parametrize("path", _PLAIN_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_a_checked_in_yaml_file_has_no_anchors(path: Path) -> None:
    assert anchors(path.read_text()) == []


def test_what_the_chart_renders_has_no_anchors() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    sets = [
        arg
        for key, v in values.items()
        if isinstance(v, dict) and "enabled" in v
        for arg in ("--set", f"{key}.enabled=true")
    ]
    out = helm("template", "infergate", str(CHART), "--include-crds", *sets).stdout
    assert "CustomResourceDefinition" in out
    assert anchors(out) == []


def test_the_crd_generator_writes_shared_schema_parts_in_full() -> None:
    for name, text in render_crd_files().items():
        assert anchors(text) == [], name


def test_the_chart_generator_writes_a_value_met_twice_in_full() -> None:
    base: list[dict[str, Any]] = copy.deepcopy(build(MANIFESTS))
    crd = next(d for d in base if d["kind"] == "CustomResourceDefinition")
    # One object in two places, as loading a file with an alias makes it.
    crd["spec"]["names"]["shortNames"] = crd["spec"]["names"]["categories"]
    files = render_chart(base, [], version="0.1.0")
    assert [name for name, text in files.items() if "&id" in text or "*id" in text] == []
