"""How the executor turns a pod spec into a process: env, $(VAR), images."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from infergate_dev.localcluster.executor.podspec import (
    ImageEnvironment,
    Lookup,
    PodSpecError,
    container_argv,
    container_env,
    expand,
    image_environment,
    pre_stop_sleep,
    resolve_port,
)

POD = {
    "metadata": {"name": "engine-0", "namespace": "llm", "uid": "u-1", "labels": {"app": "x"}},
    "spec": {"nodeName": "executor-gpu", "serviceAccountName": "engine"},
    "status": {"podIP": "127.64.0.7"},
}


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("--host=$(POD_IP)", {"POD_IP": "127.64.0.7"}, "--host=127.64.0.7"),
        ("$(MISSING)", {}, "$(MISSING)"),
        ("$$(POD_IP)", {"POD_IP": "x"}, "$(POD_IP)"),
        ("$(A)$(B)", {"A": "1", "B": "2"}, "12"),
        ("plain $HOME", {"HOME": "h"}, "plain $HOME"),
    ],
)
def test_expand_follows_kubernetes_rules(text: str, env: dict[str, str], expected: str) -> None:
    assert expand(text, env) == expected


def test_env_resolves_downward_api_configmaps_and_secrets_in_order() -> None:
    container = {
        "name": "c",
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "URL", "value": "http://$(POD_IP):8000"},
            {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}}},
        ],
    }
    lookup = Lookup(
        configmaps={"cm": {"data": {"MODE": "fast"}}},
        secrets={"s": {"data": {"pw": base64.b64encode(b"hunter2").decode()}}},
    )
    env = container_env(POD, container, lookup, {"PATH": "/bin"})
    assert env == {
        "PATH": "/bin",
        "CM_MODE": "fast",
        "POD_IP": "127.64.0.7",
        "NS": "llm",
        "APP": "x",
        "URL": "http://127.64.0.7:8000",
        "PW": "hunter2",
    }


def test_missing_required_configmap_key_is_an_error_naming_it() -> None:
    container = {
        "name": "c",
        "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}],
    }
    with pytest.raises(PodSpecError, match="ConfigMap cm key k"):
        container_env(POD, container, Lookup(configmaps={"cm": {"data": {}}}), {})


def test_command_overrides_entrypoint_and_args_expand() -> None:
    image = ImageEnvironment("vllm/*", venv=Path("/v"), entrypoint=("vllm", "serve"))
    env = {"POD_IP": "127.64.0.9"}
    assert container_argv({"name": "c", "args": ["m", "--host", "$(POD_IP)"]}, image, env) == [
        "vllm", "serve", "m", "--host", "127.64.0.9",
    ]  # fmt: skip
    assert container_argv({"name": "c", "command": ["python3"], "args": ["-V"]}, image, env) == [
        "python3",
        "-V",
    ]


def test_image_table_first_match_wins_and_unknown_images_are_named() -> None:
    table = [ImageEnvironment("vllm/*", venv=Path("/v")), ImageEnvironment("python:*")]
    assert image_environment("vllm/vllm-openai:v0.32.0", table).venv == Path("/v")
    assert image_environment("python:3.11", table).venv is None
    with pytest.raises(PodSpecError, match="'busybox' maps to no local environment"):
        image_environment("busybox", table)


def test_named_ports_resolve_from_the_container() -> None:
    container = {"name": "c", "ports": [{"name": "http", "containerPort": 8000}]}
    assert resolve_port(container, "http") == 8000
    assert resolve_port(container, 9000) == 9000
    with pytest.raises(PodSpecError, match="no port named 'metrics'"):
        resolve_port(container, "metrics")


@pytest.mark.parametrize(
    ("container", "seconds"),
    [
        ({"name": "c"}, 0.0),
        ({"name": "c", "lifecycle": {"preStop": {"sleep": {"seconds": 5}}}}, 5.0),
        ({"name": "c", "lifecycle": {"preStop": {"sleep": {"seconds": 0}}}}, 0.0),
        ({"name": "c", "lifecycle": {"preStop": {"exec": {"command": ["sleep", "5"]}}}}, 0.0),
        ({"name": "c", "lifecycle": {"postStart": {"sleep": {"seconds": 5}}}}, 0.0),
    ],
)
def test_only_a_prestop_sleep_holds_the_stop(container: dict[str, Any], seconds: float) -> None:
    assert pre_stop_sleep(container) == seconds
