"""A failed check names its first diverging layer when both sides answer the layer probe."""

from __future__ import annotations

import json

import pytest

from infergate.runner.layers import spread_positions, stand_in_notes, worst_prompts
from infergate.runner.report_store import read_report
from infergate.runner.run import EXIT_DONE, run_check
from infergate.runner.sides import SideTarget

from .fakes import FakeApi, ToyConnector, ToyEngine
from .test_run import (
    BASE_IP,
    BASE_URL,
    CAND_IP,
    CAND_URL,
    FAST,
    PROBE_IP,
    PROBE_URL,
    engines,
    spec,
    status,
)


def adapters_cluster() -> FakeApi:
    """Both revisions served by MindFormers (our adapter answers the layer probe)."""
    api = FakeApi()
    api.deployments["qwen"] = {
        "metadata": {"name": "qwen", "uid": "uid-qwen"},
        "status": {"stableRevision": "aaaaaaaaaa"},
    }
    api.add_revision("qwen", "aaaaaaaaaa", engine="mindformers", dtype="float16", ip=BASE_IP)
    api.add_revision("qwen", "bbbbbbbbbb", engine="mindformers", dtype="float16", ip=CAND_IP)
    api.add_check("check", spec())
    return api


def test_a_failed_check_names_the_corrupted_layer_in_its_reasons_and_report() -> None:
    api = adapters_cluster()
    connector = ToyConnector(
        {BASE_URL: ToyEngine(), CAND_URL: ToyEngine(offset=3, shift=-1.0, corrupt_layer=2)}
    )
    assert run_check(api, "check", FAST, connector=connector.connector()) == EXIT_DONE
    s = status(api)
    assert s["phase"] == "Failed"
    [layer] = [r for r in s["verdict"]["reasons"] if r["metric"] == "layers.firstDiverging"]
    assert "first diverging layer: layer 2 of 4" in layer["message"]
    report = read_report(api.config_maps["check-report"]["data"], {})
    html = report["report.html"]
    assert "First diverging layer" in html
    assert "<svg" in html
    document = json.loads(report["result.json"])
    assert any("layer 2 of 4" in r for r in document["verdict"]["reasons"])


def test_a_corruption_at_the_first_layer_is_layer_0() -> None:
    api = adapters_cluster()
    connector = ToyConnector(
        {BASE_URL: ToyEngine(), CAND_URL: ToyEngine(offset=3, shift=-1.0, corrupt_layer=0)}
    )
    run_check(api, "check", FAST, connector=connector.connector())
    reasons = [r["message"] for r in status(api)["verdict"]["reasons"]]
    assert any("first diverging layer: layer 0 of 4" in r for r in reasons)


def test_a_side_without_the_layer_probe_is_not_localised_and_the_report_says_why() -> None:
    from .test_run import cluster  # baseline vLLM (pooling probe), candidate MindFormers

    api = cluster()
    connector = engines(ToyEngine(offset=3, shift=-1.0, corrupt_layer=1))
    assert PROBE_URL in connector.engines
    run_check(api, "check", FAST, connector=connector.connector())
    s = status(api)
    assert s["phase"] == "Failed"
    assert not [r for r in s["verdict"]["reasons"] if r["metric"] == "layers.firstDiverging"]
    html = read_report(api.config_maps["check-report"]["data"], {})["report.html"]
    assert "cannot return intermediate layers" in html


def test_a_passed_check_asks_no_layers() -> None:
    api = adapters_cluster()
    connector = ToyConnector({BASE_URL: ToyEngine(), CAND_URL: ToyEngine(corrupt_layer=1)})
    run_check(api, "check", FAST, connector=connector.connector())
    assert status(api)["phase"] == "Passed"
    html = read_report(api.config_maps["check-report"]["data"], {})["report.html"]
    assert "First diverging layer" not in html


def test_positions_and_worst_prompts_are_bounded() -> None:
    assert spread_positions(5) == [0, 1, 2, 3, 4]
    spread = spread_positions(10_000, 32)
    assert len(spread) == 32
    assert spread[0] == 0
    assert spread[-1] == 9_999
    assert worst_prompts([]) == []


STAND_IN_URL = f"http://{PROBE_IP}:8002"


def vllm_candidate_cluster(stand_in: str | None) -> FakeApi:
    """Baseline MindFormers (our adapter); candidate vLLM with its probe, whose Service says
    whether the transformers stand-in runs (`stand_in`: the annotation's value)."""
    api = FakeApi()
    api.deployments["qwen"] = {
        "metadata": {"name": "qwen", "uid": "uid-qwen"},
        "status": {"stableRevision": "aaaaaaaaaa"},
    }
    api.add_revision("qwen", "aaaaaaaaaa", engine="mindformers", dtype="float16", ip=BASE_IP)
    api.add_revision("qwen", "bbbbbbbbbb", engine="vllm", dtype="float16", ip=CAND_IP)
    api.add_probe("check", "candidate", PROBE_IP)
    probe = api.services["check-probe-candidate"]
    if stand_in is not None:
        probe["metadata"]["annotations"] = {"infergate.io/layer-stand-in": stand_in}
    if stand_in == "transformers":
        probe["spec"]["ports"].append({"name": "layers", "port": 8002, "targetPort": "layers"})
        api.slices["check-probe-candidate"][0]["ports"].append({"name": "layers", "port": 8002})
    api.add_check("check", spec())
    return api


def vllm_candidate_engines(stand_in: ToyEngine) -> ToyConnector:
    return ToyConnector(
        {
            BASE_URL: ToyEngine(),
            CAND_URL: ToyEngine(adapter=False, offset=3, shift=-1.0),
            PROBE_URL: ToyEngine(adapter=False, shift=-1.0),  # its pooling probe
            STAND_IN_URL: stand_in,
        }
    )


def test_a_vllm_side_is_localised_through_its_stand_in_and_the_reason_says_so() -> None:
    api = vllm_candidate_cluster("transformers")
    connector = vllm_candidate_engines(ToyEngine(corrupt_layer=2))
    assert run_check(api, "check", FAST, connector=connector.connector()) == EXIT_DONE
    s = status(api)
    assert s["phase"] == "Failed"
    [layer] = [r for r in s["verdict"]["reasons"] if r["metric"] == "layers.firstDiverging"]
    assert "first diverging layer: layer 2 of 4" in layer["message"]
    assert "candidate (vllm)" in layer["message"]
    assert "answered for it as a stand-in" in layer["message"]
    report = read_report(api.config_maps["check-report"]["data"], {})
    assert "answered for it as a stand-in" in report["report.html"]
    document = json.loads(report["result.json"])
    assert any("candidate (vllm)" in r and "stand-in" in r for r in document["verdict"]["reasons"])


def test_a_stand_in_that_finds_no_layer_says_it_cannot_see_vllms_kernels() -> None:
    api = vllm_candidate_cluster("transformers")
    connector = vllm_candidate_engines(ToyEngine())  # same weights: the layers agree
    run_check(api, "check", FAST, connector=connector.connector())
    s = status(api)
    assert s["phase"] == "Failed"
    [layer] = [r for r in s["verdict"]["reasons"] if r["metric"] == "layers.firstDiverging"]
    assert "no layer left the band" in layer["message"]
    html = read_report(api.config_maps["check-report"]["data"], {})["report.html"]
    assert "not vLLM&#x27;s kernels" in html


@pytest.mark.parametrize(
    ("annotation", "said"),
    [
        (
            "none: the weights are not a mounted directory (pvc:// or file:// only)",
            "the weights are not a mounted directory",
        ),
        (None, "runs no transformers stand-in"),
    ],
)
def test_a_vllm_side_without_a_stand_in_is_not_localised_and_the_report_says_why(
    annotation: str | None, said: str
) -> None:
    api = vllm_candidate_cluster(annotation)
    connector = vllm_candidate_engines(ToyEngine(corrupt_layer=2))
    run_check(api, "check", FAST, connector=connector.connector())
    s = status(api)
    assert s["phase"] == "Failed"
    assert not [r for r in s["verdict"]["reasons"] if r["metric"] == "layers.firstDiverging"]
    html = read_report(api.config_maps["check-report"]["data"], {})["report.html"]
    assert "candidate (vllm) cannot return intermediate layers" in html
    assert said in html


def _target(side: str, engine: str) -> SideTarget:
    return SideTarget(
        side=side,  # type: ignore[arg-type]
        url="http://127.0.0.1:1",
        model="fixture",
        engine=engine,
        engine_version="x",
        dtype="bfloat16",
        description=side,
    )


@pytest.mark.parametrize(
    ("engines_", "expected"),
    [
        (("mindformers", "transformers"), []),
        (("mindformers", "vllm"), ["candidate (vllm): vllm cannot return"]),
        (("vllm", "vllm"), ["baseline (vllm), candidate (vllm): vllm cannot return"]),
    ],
)
def test_each_side_whose_layers_come_from_a_stand_in_is_named_once(
    engines_: tuple[str, str], expected: list[str]
) -> None:
    notes = stand_in_notes([_target("baseline", engines_[0]), _target("candidate", engines_[1])])
    assert len(notes) == len(expected)
    for note, start in zip(notes, expected, strict=True):
        assert note.startswith(start)
        assert "transformers reference" in note


class _Probe:
    """A layer probe whose answers move by `jitter` (relative, growing with depth) when
    several requests are in flight together."""

    def __init__(self, jitter: float) -> None:
        import threading

        self.jitter = jitter
        self.in_flight = 0
        self.lock = threading.Lock()

    def layer_states(self, token_ids, *, positions=None, sketch_dims=None):  # type: ignore[no-untyped-def]  # noqa: ARG002
        import time

        import numpy as np

        from infergate.engines.layer_probe import LayerStates

        with self.lock:
            self.in_flight += 1
        time.sleep(0.05)  # the others arrive meanwhile
        with self.lock:
            together = self.in_flight > 1
        kept = list(positions if positions is not None else range(len(token_ids)))
        states = np.stack([np.full((len(kept), 8), float(i + 1), np.float32) for i in range(4)])
        if together:
            states = states * (1.0 + self.jitter * np.arange(1, 5, dtype=np.float32))[:, None, None]
        with self.lock:
            self.in_flight -= 1
        names = ("embeddings", "layer 0", "layer 1", "final norm")
        return LayerStates(names, tuple(kept), states, None, None)


@pytest.mark.parametrize(
    ("jitter", "expected"), [(0.0, [0.0] * 4), (1e-3, [1e-3, 2e-3, 3e-3, 4e-3])]
)
def test_per_layer_self_noise_is_alone_against_together(
    jitter: float, expected: list[float]
) -> None:
    from infergate.runner.layers import layer_noise

    sequences = [list(range(40)), list(range(50)), list(range(60))]
    noise = layer_noise(_Probe(jitter), sequences)
    assert noise is not None
    assert noise.names == ["embeddings", "layer 0", "layer 1", "final norm"]
    assert noise.rel_l2 == pytest.approx(expected, rel=1e-3, abs=1e-9)
    assert noise.positions == 32 * 3
    assert layer_noise(_Probe(jitter), []) is None
