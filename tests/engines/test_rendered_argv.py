"""vLLM runs with exactly the command line the operator renders for a revision.

The operator's engine pods, the parity probe and the recorder share one argv builder
(`infergate.render.vllm`); this test takes the container of a rendered revision
Deployment as it stands, starts it from the vLLM venv (the pod IP is loopback, the
port a free one, the same substitutions the local executor makes) and asks it for a
completion: what is deployed is what starts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from infergate.api.inference_deployment import InferenceDeploymentSpec
from infergate.engines.launch import free_port
from infergate.engines.venvs import engine_environment, engine_python
from infergate.render import render_revision
from infergate.render.launch import POD_IP_REF
from infergate.render.pod_security import ENGINE_HOME

pytestmark = pytest.mark.engines


def test_vllm_starts_with_the_rendered_revision_argv(fixture_model: Path, tmp_path: Path) -> None:
    spec = InferenceDeploymentSpec.model_validate(
        {
            "model": {"name": "fixture", "uri": f"file://{fixture_model}"},
            "engine": {
                "kind": "vllm",
                "dtype": "float32",
                "maxModelLen": 512,
                "deterministic": False,
                "config": {"rms_norm_eps": 1e-6},
            },
            "accelerator": {"kind": "nvidia-gpu"},
            "rollout": {"autoPromote": False},
        }
    )
    deployment = render_revision("fixture", "llm", spec).deployment
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["vllm"]
    args = list(container["args"])
    port = free_port()
    args[args.index("--port") + 1] = str(port)
    args = [a.replace(POD_IP_REF, "127.0.0.1") for a in args]
    env = engine_environment()
    # The pod's writable home (an emptyDir at ENGINE_HOME) is a directory of this test.
    home = tmp_path / "home"
    env.update(
        {
            e["name"]: e["value"].replace(ENGINE_HOME, str(home))
            for e in container.get("env") or []
            if "value" in e
        }
    )
    env.update(VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND="nobind")
    vllm = engine_python("vllm").parent / "vllm"
    log = (tmp_path / "vllm.log").open("wb")
    process = subprocess.Popen(
        [str(vllm), *args], stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 300
        while True:
            assert process.poll() is None, (tmp_path / "vllm.log").read_text()[-4000:]
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "vLLM did not become healthy in 300s"
            time.sleep(1)
        models = httpx.get(f"{url}/v1/models", timeout=30).json()
        assert [m["id"] for m in models["data"]] == ["fixture"]  # --served-model-name
        answer = httpx.post(
            f"{url}/v1/completions",
            json={"model": "fixture", "prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0,
                  "logprobs": 20},
            timeout=120,
        ).json()  # fmt: skip
        # --max-logprobs 20 is what parity needs: 20 top logprobs per step are served.
        assert len(answer["choices"][0]["logprobs"]["top_logprobs"][0]) == 20
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)
        log.close()
