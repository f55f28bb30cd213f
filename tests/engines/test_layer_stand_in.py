"""A failed check between two vLLM revisions names its first diverging layer, through the
transformers stand-in.

Real processes, as a vLLM side's probe pod runs them, on loopback: for each side a vLLM
server (`infergate serve --engine vllm`, the fixture in bfloat16), our fingerprint
server beside it, and the layer stand-in (`infergate layer-stand-in`) reading the
revision's pinned engine.json as rendered by the operator (`render_revision`). The
candidate's weights have decoder layer 1 corrupted (a damaged shard). The runner's own
code (`run_check` with its HTTP connector) drives the check; only the API server is
replaced by the in-memory one of the runner's unit tests, whose Services and
EndpointSlices point at these processes.

The check Fails; the stand-ins load the model only then (not while the check runs) and
the verdict's reasons name layer 1, saying that the vLLM sides' layers came from the
stand-in.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from infergate.api.inference_deployment import InferenceDeploymentSpec
from infergate.engines.launch import EngineServer, ServerSpec, free_port
from infergate.engines.venvs import engine_environment, engine_python
from infergate.fixture.variants import corrupt_layer
from infergate.render.check_names import SideName, probe_name
from infergate.render.layer_stand_in import ANNOTATION_LAYER_STAND_IN
from infergate.render.objects import render_revision
from infergate.runner.report_store import read_report
from infergate.runner.run import EXIT_DONE, Connector, RunOptions, run_check
from infergate.suite import load_suite
from tests.unit.runner.fakes import (
    FakeApi,
    check_owner,
    controller_ref,
    deployment_owner,
    uid_of,
    workload_ref,
)

pytestmark = pytest.mark.engines

CORRUPTED = 1
HOST = "127.0.0.1"


class Process:
    """One of our servers from the vLLM venv (as the vLLM image runs it), healthy or raised."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.port = free_port(HOST)
        self.url = f"http://{HOST}:{self.port}"
        self._log = log.open("wb")
        self._process = subprocess.Popen(
            [str(engine_python("vllm")), "-m", *argv, "--host", HOST, "--port", str(self.port)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=engine_environment(),
            start_new_session=True,
        )
        self._path = log
        deadline = time.monotonic() + 120
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited:\n{log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{argv[0]} not healthy:\n{log.read_text()[-2000:]}")
            time.sleep(0.3)

    def stop(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._process.kill()
        self._log.close()


def revision(model: Path) -> tuple[str, dict[str, Any]]:
    """The revision the operator renders for a vLLM deployment of `model`: (hash, ConfigMap)."""
    spec = InferenceDeploymentSpec.model_validate(
        {
            "model": {"name": "fixture", "uri": f"file://{model}"},
            "engine": {"kind": "vllm", "dtype": "bfloat16", "maxModelLen": 2048},
            "accelerator": {"kind": "nvidia-gpu"},
            "replicas": 1,
            "rollout": {"autoPromote": False},
        }
    )
    rendered = render_revision("qwen", "default", spec)
    config_map = rendered.config_map
    return config_map["metadata"]["name"].removeprefix("qwen-"), config_map


def service(
    api: FakeApi,
    name: str,
    ports: dict[str, int],
    owner: dict[str, Any],
    pod: dict[str, Any],
    **annotations: str,
) -> None:
    """A Service controlled by `owner`, with the slice the cluster publishes for it: its
    one endpoint is `pod`, at this host's address."""
    api.services[name] = {
        "metadata": {
            "name": name,
            "namespace": api.namespace,
            "uid": uid_of(name),
            "annotations": annotations,
            "ownerReferences": [owner],
        },
        "spec": {"ports": [{"name": n, "port": p, "targetPort": n} for n, p in ports.items()]},
    }
    api.slices[name] = [
        {
            "metadata": {
                "name": f"{name}-x",
                "labels": {
                    "kubernetes.io/service-name": name,
                    "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                },
                "ownerReferences": [controller_ref("Service", name)],
            },
            "addressType": "IPv4",
            "endpoints": [
                {
                    "addresses": [HOST],
                    "conditions": {"ready": True},
                    "targetRef": {
                        "kind": "Pod",
                        "name": pod["metadata"]["name"],
                        "namespace": pod["metadata"]["namespace"],
                        "uid": pod["metadata"]["uid"],
                    },
                }
            ],
            "ports": [{"name": n, "port": p} for n, p in ports.items()],
        }
    ]


@pytest.fixture(scope="module")
def sides(fixture_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeApi]:
    """Both sides' processes, and an API that describes them as the operator would."""
    work = tmp_path_factory.mktemp("stand-in")
    corrupted = work / "corrupted"
    corrupt_layer(layer=CORRUPTED, relative_noise=0.5, seed=7)(fixture_model, corrupted)
    api = FakeApi()
    started: list[Any] = []
    try:
        revisions = {}
        models: tuple[tuple[SideName, Path], ...] = (
            ("baseline", fixture_model),
            ("candidate", corrupted),
        )
        for side, model in models:
            rev, config_map = revision(model)
            revisions[side] = rev
            config_map["metadata"]["ownerReferences"] = [deployment_owner("qwen")]
            api.config_maps[config_map["metadata"]["name"]] = config_map
            engine_json = work / f"{side}-engine.json"
            engine_json.write_text(config_map["data"]["engine.json"])
            vllm = EngineServer(ServerSpec("vllm", model, "bfloat16"), work / f"{side}-vllm.log")
            started.append(vllm.start(timeout=600))
            fingerprints = Process(
                ["infergate.runtime.fingerprint_server", "--model", str(model), "--dtype",
                 "bfloat16", "--vllm-url", vllm.url],
                work / f"{side}-fingerprints.log",
            )  # fmt: skip
            started.append(fingerprints)
            stand_in = Process(
                ["infergate.cli", "layer-stand-in", "--engine-config", str(engine_json)],
                work / f"{side}-stand-in.log",
            )
            started.append(stand_in)
            # The revision's pod, made by the Deployment whose uid the operator recorded;
            # the probe's, made by the check: the only pods the runner calls.
            name = config_map["metadata"]["name"]
            api.recorded[("qwen", rev)] = workload_ref("Deployment", name)["uid"]
            revision_pod = api.add_revision_pod(name, rev, HOST)
            service(api, name, {"http": vllm.port}, deployment_owner("qwen"), revision_pod)
            probe = probe_name("check", side)
            probe_pod = api.add_pod(
                probe, HOST, owner=check_owner("check"), labels={"probe": probe}
            )
            service(
                api,
                probe,
                {"fingerprints": fingerprints.port, "layers": stand_in.port},
                check_owner("check"),
                probe_pod,
                **{ANNOTATION_LAYER_STAND_IN: "transformers"},
            )
        api.deployments["qwen"] = {
            "metadata": {"name": "qwen", "uid": "uid-qwen"},
            "status": {"stableRevision": revisions["baseline"]},
        }
        prompts = load_suite("default").select(long=False).prompts[:12]
        api.add_check(
            "check",
            {
                "baseline": {
                    "inferenceDeploymentRef": {"name": "qwen"},
                    "revision": revisions["baseline"],
                },
                "candidate": {
                    "inferenceDeploymentRef": {"name": "qwen"},
                    "revision": revisions["candidate"],
                },
                "suite": {"inline": [{"id": p.id, "text": p.text} for p in prompts]},
                "sampling": {"maxTokens": 16, "topLogprobs": 5},
                "hiddenStates": {"enabled": False},
                "thresholds": {"minLongPrompts": 0},
            },
        )
        yield api
    finally:
        for process in reversed(started):
            process.stop()


def _stand_in_loaded(api: FakeApi, side: SideName) -> bool:
    [endpoint_slice] = api.slices[probe_name("check", side)]
    port = next(p["port"] for p in endpoint_slice["ports"] if p["name"] == "layers")
    answer = httpx.get(f"http://{HOST}:{port}/v1/parity/stand_in", timeout=10).json()
    loaded: bool = answer["loaded"]
    return loaded


def test_a_corrupted_vllm_layer_is_named_through_the_stand_in(sides: FakeApi) -> None:
    api = sides
    assert not _stand_in_loaded(api, "baseline")
    assert not _stand_in_loaded(api, "candidate")
    options = RunOptions(concurrency=2, wait_for_sides=30, progress_interval=0.0)
    assert run_check(api, "check", options, connector=Connector()) == EXIT_DONE
    status = api.checks["check"]["status"]
    assert status["phase"] == "Failed", status
    reasons = [r for r in status["verdict"]["reasons"] if r["metric"] == "layers.firstDiverging"]
    assert len(reasons) == 1, status["verdict"]["reasons"]
    message = reasons[0]["message"]
    assert f"first diverging layer: layer {CORRUPTED} of 2" in message
    assert "baseline (vllm)" in message
    assert "candidate (vllm)" in message
    assert "transformers reference" in message
    assert "stand-in" in message
    # Loaded for the failed check's layer probe, not before.
    assert _stand_in_loaded(api, "baseline")
    assert _stand_in_loaded(api, "candidate")
    report = read_report(api.config_maps["check-report"]["data"], {})
    assert "First diverging layer" in report["report.html"]
    assert "answered for it as a stand-in" in report["report.html"]
    document = json.loads(report["result.json"])
    assert any(f"layer {CORRUPTED} of 2" in r for r in document["verdict"]["reasons"])
