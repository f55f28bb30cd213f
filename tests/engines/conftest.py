"""Engine servers for the engine tests: started once per session, from the engine venvs.

Tests marked `engines` need the venvs and the fixture model (`make engines`). Where they
are missing those tests are skipped with the command that installs them, unless
INFERGATE_REQUIRE_ENGINES=1 (set by `make test-engines`), which turns the skip into a
failure so a CI run can never pass without having run them.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from infergate.engines.launch import EngineServer, ServerSpec
from infergate.engines.venvs import EngineVenvError, engine_environment, engine_python
from infergate.fixture.generate import default_model_dir, is_complete


def _missing(reason: str) -> None:
    if os.environ.get("INFERGATE_REQUIRE_ENGINES") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def _python(engine: str) -> Path:
    try:
        return engine_python(engine)
    except EngineVenvError as exc:
        _missing(str(exc))
        raise


@pytest.fixture(scope="session")
def fixture_model() -> Path:
    """The cached fixture model, generated with the vLLM venv when missing."""
    model = default_model_dir()
    if not is_complete(model):
        python = _python("vllm")
        subprocess.run(
            [str(python), "-m", "infergate.cli", "fixture"],
            check=True,
            env=engine_environment(),
            timeout=600,
        )
    return model


class EngineFarm:
    """Servers keyed by their spec, each started on first use and stopped at session end."""

    def __init__(self, model: Path, logs: Path) -> None:
        self._model = model
        self._logs = logs
        self._servers: dict[tuple[object, ...], EngineServer] = {}

    def server(
        self,
        engine: str,
        dtype: str,
        *,
        overrides: dict[str, float] | None = None,
        probe: bool = False,
    ) -> EngineServer:
        overrides = overrides or {}
        key = (engine, dtype, tuple(sorted(overrides.items())), probe)
        if key not in self._servers:
            _python(engine)
            spec = ServerSpec(engine, self._model, dtype, overrides=overrides, probe=probe)
            name = "-".join([engine, dtype, *(f"{k}={v}" for k, v in overrides.items())])
            server = EngineServer(spec, self._logs / f"{name}{'-probe' if probe else ''}.log")
            self._servers[key] = server.start(timeout=600)
        return self._servers[key]

    def stop_all(self) -> None:
        for server in self._servers.values():
            server.stop()


@pytest.fixture(scope="session")
def engines(fixture_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineFarm]:
    farm = EngineFarm(fixture_model, tmp_path_factory.mktemp("engine-logs"))
    try:
        yield farm
    finally:
        farm.stop_all()
