"""First diverging layer on the fixture model: the per-layer errors behind the engine test.

Serves the clean fixture (transformers reference, float32), copies of it with decoder
layer k's attention output projection perturbed, the clean fixture with RMSNorm epsilon
1e-4 instead of 1e-6, and MindFormers float32 on the clean and the layer-0 copy; asks
each for every layer's hidden states on the same token ids (POST /v1/parity/layer_states)
and prints the relative L2 (P99 over positions) per state against the clean reference,
the band and the layer named. Writes one SVG per case (the report's per-layer plot).

    .venv/bin/python experiments/layer_localisation.py --out out/layers
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from infergate.engines.client import EngineClient
from infergate.engines.launch import EngineServer, ServerSpec
from infergate.engines.layer_probe import LayerProbe, LayerStates
from infergate.fixture.generate import default_model_dir
from infergate.parity.layers import depth_band, layer_probe_plan, localise, per_layer_errors
from infergate.report.layer_chart import layer_error_chart
from infergate.suite import load_suite

BAND = (1e-5, 1e-4)  # fp32 across frameworks, as in tests/engines/test_layer_localisation.py


def corrupt_layer(model: Path, out: Path, layer: int) -> Path:
    """A copy of `model` whose layer `layer` o_proj weight has noise of half its std added."""
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(model, out, ignore=shutil.ignore_patterns("*.safetensors"))
    for path in model.glob("*.safetensors"):
        tensors = load_file(str(path))
        name = f"model.layers.{layer}.self_attn.o_proj.weight"
        if name in tensors:
            weight = tensors[name]
            noise = np.random.default_rng(layer).standard_normal(weight.shape)
            tensors[name] = (weight + 0.5 * weight.std() * noise).astype(weight.dtype)
        save_file(tensors, str(out / path.name), metadata={"format": "pt"})
    return out


def _states(server: EngineServer, ids: list[int]) -> LayerStates:
    probe = LayerProbe(server.url, "fixture")
    try:
        return probe.layer_states(ids)
    finally:
        probe.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/layers"))
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    model = default_model_dir()
    layers = int(json.loads((model / "config.json").read_text())["num_hidden_layers"])
    cases = {"clean": ServerSpec("transformers", model, "float32")}
    for k in range(layers):
        copy = corrupt_layer(model, out / f"corrupt-{k}", k)
        cases[f"transformers, layer {k} corrupted"] = ServerSpec("transformers", copy, "float32")
    cases["transformers, rms_norm_eps 1e-4"] = ServerSpec(
        "transformers", model, "float32", overrides={"rms_norm_eps": 1e-4}
    )
    cases["mindformers fp32"] = ServerSpec("mindformers", model, "float32")
    cases["mindformers fp32, layer 0 corrupted"] = ServerSpec(
        "mindformers", out / "corrupt-0", "float32"
    )
    servers: dict[str, EngineServer] = {}
    lines: list[str] = []
    try:
        for name, spec in cases.items():
            servers[name] = EngineServer(spec, out / f"{name.replace(' ', '_')}.log").start(600)
        with EngineClient(servers["clean"].url, "fixture") as client:
            ids = [
                i
                for p in load_suite("default").select(long=False).prompts[:2]
                for i in client.tokenize(p.text or "")
            ]
        reference = _states(servers["clean"], ids)
        band = depth_band(len(reference.names), *BAND)
        lines.append(f"{len(ids)} positions; band {BAND[0]:g} (embeddings) .. {BAND[1]:g}")
        lines.append("")
        lines.append("| candidate | " + " | ".join(reference.names) + " | named |")
        lines.append("|---|" + "---|" * len(reference.names) + "---|")
        lines.append("| band | " + " | ".join(f"{b:.2g}" for b in band) + " | |")
        for index, name in enumerate(cases):
            if name == "clean":
                continue
            states = _states(servers[name], ids)
            errors = per_layer_errors(reference.states, states.states, reference.names)
            engine = cases[name].engine
            found = localise(errors, band, notes=(layer_probe_plan(engine).note,))
            cells = " | ".join(f"{e:.2g}" for e in errors.rel_l2)
            lines.append(f"| {name} | {cells} | {found.name or '-'} |")
            svg = layer_error_chart(
                reference.names, errors.rel_l2.tolist(), band, first=found.index, note=name
            )
            (out / f"case-{index}.svg").write_text(svg, encoding="utf-8")
    finally:
        for server in servers.values():
            server.stop()
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
