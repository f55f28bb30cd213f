"""crds/kustomization.yaml: the install applies every generated CRD, and only those."""

from __future__ import annotations

import yaml

from infergate.api.crd import render_crd_files
from infergate.cli import main
from tests.unit.packaging.lockfiles import REPO

CRDS = REPO / "crds"


def test_lists_every_generated_crd() -> None:
    kustomization = yaml.safe_load((CRDS / "kustomization.yaml").read_text(encoding="utf-8"))
    assert sorted(kustomization["resources"]) == sorted(render_crd_files())


def test_crds_check_accepts_the_kustomization_beside_the_crds() -> None:
    assert main(["crds", "--check", str(CRDS)]) == 0
