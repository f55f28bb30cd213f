"""KWOK's configuration: options plus the node and pod stages it plays.

Standalone kwok has no built-in stages; they ship inside the kwok module and
are copied next to the binary at build time. We play nodes `fast` +
`heartbeat-with-lease` and pods `fast` (ready, complete for Job pods, delete).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from infergate.localcluster.layout import KWOK_POD_CIDR

STAGE_SETS = ("node/fast", "node/heartbeat-with-lease", "pod/fast")


def kwok_configuration() -> dict[str, object]:
    return {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "metadata": {"name": "infergate-local"},
        "options": {
            "cidr": KWOK_POD_CIDR,
            "nodeIP": "127.0.0.1",
            "manageAllNodes": False,
            "manageNodesWithAnnotationSelector": "kwok.x-k8s.io/node=fake",
            "nodeLeaseDurationSeconds": 40,
            # A partial configuration gets no defaults for these; zero is refused.
            "nodeLeaseParallelism": 4,
            "nodePlayStageParallelism": 4,
            "podPlayStageParallelism": 4,
            "podsOnNodeSyncParallelism": 4,
            "serverAddress": "127.0.0.1:0",
        },
    }


def write_kwok_config(path: Path, stage_root: Path) -> None:
    """Write the multi-document config: the KwokConfiguration, then the stages."""
    documents: list[object] = [kwok_configuration()]
    for stage_set in STAGE_SETS:
        folder = stage_root / stage_set
        stage_files = sorted(folder.glob("*.yaml"))
        stages = [f for f in stage_files if f.name != "kustomization.yaml"]
        if not stages:
            raise FileNotFoundError(f"no KWOK stages in {folder}; rebuild kwok")
        for stage_file in stages:
            documents.extend(d for d in yaml.safe_load_all(stage_file.read_text()) if d)
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
