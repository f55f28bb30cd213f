"""The API server and the operator's models give the same answer to the same input.

Every object of the admission table (tests/unit/api/admission_cases.py: negative
quantities, flags that load from elsewhere, control characters, thresholds that cannot
both pass and fail, incoherent deadlines, and a good input beside each bad one) is sent
to the real API server with the CRDs of this checkout (a server-side dry run: nothing is
stored) and validated by the models. Both must say what the table says: a rule in the
CRD but not in the models (or the reverse) shows as a disagreement naming the case.
"""

from __future__ import annotations

import json

import pytest

from tests.harness import Cluster
from tests.unit.api.admission_cases import AdmissionCase, admission_cases, models_accept
from tests.unit.api.manifests import CRDS_DIR

pytestmark = pytest.mark.cluster

_CRD_NAMES = ("inferencedeployments.infergate.io", "paritychecks.infergate.io")


@pytest.fixture(scope="module")
def crds(cluster: Cluster) -> Cluster:
    """The CRDs of this checkout, installed and Established."""
    cluster.kubectl("apply", "-f", str(CRDS_DIR))
    cluster.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        *(f"crd/{name}" for name in _CRD_NAMES),
    )
    return cluster


@pytest.mark.parametrize("case", admission_cases(), ids=lambda c: c.name)
def test_the_api_server_and_the_models_give_the_tables_answer(
    crds: Cluster, namespace: str, case: AdmissionCase
) -> None:
    sent = crds.kubectl(
        "apply", "--dry-run=server", "-n", namespace, "-f", "-",
        input=json.dumps(case.document), check=False,
    )  # fmt: skip
    server = sent.returncode == 0
    models = models_accept(case.document)
    said = sent.stderr.strip() or sent.stdout.strip()
    assert (server, models) == (case.accepted, case.accepted), (
        f"{case.name}: the table says {'accept' if case.accepted else 'refuse'}; "
        f"API server {'accepted' if server else 'refused'} ({said}), "
        f"models {'accepted' if models else 'refused'}"
    )
    if not case.accepted and not case.name.startswith("name-"):
        # A refusal names the field it refuses (metadata.name aside).
        assert "spec." in sent.stderr, sent.stderr
