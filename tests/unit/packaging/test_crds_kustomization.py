"""crds/Kustomization: the install applies every generated CRD, and only those; it is
named so that `kubectl apply -f crds/` and `infergate crds --check` read only CRDs."""

from __future__ import annotations

import yaml

from infergate.api.crd import render_crd_files
from infergate.cli import main
from tests.unit.packaging.lockfiles import REPO

CRDS = REPO / "crds"


def test_lists_every_generated_crd() -> None:
    kustomization = yaml.safe_load((CRDS / "Kustomization").read_text(encoding="utf-8"))
    assert sorted(kustomization["resources"]) == sorted(render_crd_files())


def test_crds_check_accepts_the_kustomization_beside_the_crds() -> None:
    assert main(["crds", "--check", str(CRDS)]) == 0


def test_kubectl_apply_f_of_the_directory_sees_only_crds() -> None:
    """`kubectl apply -f crds/` reads *.yaml, *.yml and *.json: only generated CRDs there."""
    readable = [p.name for p in CRDS.iterdir() if p.suffix in {".yaml", ".yml", ".json"}]
    assert sorted(readable) == sorted(render_crd_files())
