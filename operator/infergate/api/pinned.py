"""What the typed engine fields pin, and every spelling that could set it again.

`spec.engine.args` and `spec.engine.config` reach the engine after the values
infergate renders from typed fields (dtype, maxModelLen, tensorParallelSize,
seed, model, config). A later flag wins in argparse, and a `config` key wins
over the pinned MindFormers `model_config`, so either could silently replace a
pinned value while the operator still reports the typed one. Both are refused,
in the pydantic models and in the CRD's CEL rules, from the lists below.

Flags are matched the way the engines' parsers read them:

- vLLM's `FlexibleArgumentParser.parse_args` (vllm/utils/argparse_utils.py)
  turns `_` into `-` in the flag name (`--max_model_len`), splits `--flag=value`,
  and reads `--flag.key=value` / `--flag.key value` as a JSON sub-key of
  `--flag` (`--hf-overrides.rms_norm_eps=1e-4`). It keeps argparse's default
  `allow_abbrev=True`, so any unambiguous prefix selects a flag
  (`--max-model 4096` is `--max-model-len 4096`); single-dash options are
  prefix-matched by argparse whatever `allow_abbrev` says (`-t` for `-tp`).
  `-O<n>` is `--optimization-level`, which is not pinned.
- The MindFormers adapter (`infergate serve`) uses the standard argparse,
  which also abbreviates but does not rewrite underscores: an underscore
  spelling is refused anyway, so one rule covers both engines.

So an argument is refused when its flag name (the text before the first `=` or
`.`, underscores read as dashes) is a pinned flag or a prefix of one. Prefixes
that are ambiguous would make the engine refuse to start; refusing them at
admission costs nothing and keeps the rule one regular expression.

An argument is one printable token: control characters (a newline, a tab, NUL)
are refused, so no spelling hides a flag from the rule or splits into two on the
way to the engine. The rule is matched against the whole argument in Python as
RE2 matches it in the CRD (`fullmatch`: Python's `$` also matches before a final
newline, RE2's only at the end of the text).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

# Long flags set from typed fields, by either engine's renderer (render/vllm.py,
# render/mindformers.py), or that would load unpinned settings from elsewhere
# (--config: a YAML file for vLLM, numeric overrides for the adapter;
# --engine-config: the adapter's pinned engine.json).
_SET_FROM_FIELDS: tuple[str, ...] = (
    "--model",
    "--served-model-name",
    "--dtype",
    "--max-model-len",
    "--tensor-parallel-size",
    "--seed",
    "--host",
    "--port",
    "--generation-config",
    "--max-logprobs",
    "--hf-overrides",
    "--revision",
    "--load-format",
    "--engine",
    "--engine-config",
    "--config",
)
# vLLM flags that would serve other weights, config, tokenizer or generation settings
# than spec.model.uri names (another repository or revision, dummy weights), or run
# code shipped with the model: the operator would report one model while another
# answers. No field asks for remote code, so --trust-remote-code is refused outright.
# --tokenizer-mode and --config-format stay allowed: they choose how the model's own
# files are read, not which files, and the revision hash covers them.
_LOADS_FROM_ELSEWHERE: tuple[str, ...] = (
    "--tokenizer",
    "--tokenizer-revision",
    "--hf-config-path",
    "--code-revision",
    "--override-generation-config",
    "--trust-remote-code",
)
PINNED_LONG_FLAGS: tuple[str, ...] = _SET_FROM_FIELDS + _LOADS_FROM_ELSEWHERE
# Single-dash aliases of pinned flags (vLLM: -tp for --tensor-parallel-size).
PINNED_SHORT_FLAGS: tuple[str, ...] = ("-tp",)
PINNED_FLAGS: tuple[str, ...] = PINNED_LONG_FLAGS + PINNED_SHORT_FLAGS

# Keys of the MindFormers model_config that render/mindformers.py pins from typed
# fields (dtype, paramsDtype, maxModelLen; float32 reductions; incremental
# inference), and checkpoint_name_or_path, which would load weights from somewhere
# other than spec.model.uri.
MINDFORMERS_PINNED_CONFIG_KEYS: tuple[str, ...] = (
    "compute_dtype",
    "param_init_type",
    "layernorm_compute_type",
    "softmax_compute_type",
    "rotary_dtype",
    "seq_length",
    "use_past",
    "checkpoint_name_or_path",
)

ARGS_MESSAGE = (
    "args must not set "
    + ", ".join(PINNED_FLAGS)
    + " in any spelling (underscores for dashes, --flag=value, --flag.key sub-keys, or an "
    "abbreviation such as --max-model): they are pinned from spec.model and spec.engine "
    "(dtype, maxModelLen, tensorParallelSize, seed, config), or would load weights, config, "
    "tokenizer, generation settings or code from elsewhere than model.uri; set those fields "
    "instead"
)
# Any C0 control character or DEL; the same text in the CEL rule and in Python.
CONTROL_CHARACTER_PATTERN = r"[\x00-\x1f\x7f]"
CONTROL_MESSAGE = (
    "args must not contain control characters (newline, tab, NUL, ...): each argument is "
    "one printable token, e.g. --enforce-eager or --max-num-seqs=8"
)
CONFIG_MESSAGE = (
    "config must not set "
    + ", ".join(MINDFORMERS_PINNED_CONFIG_KEYS)
    + " for mindformers: they are pinned from engine.dtype, engine.paramsDtype and "
    "engine.maxModelLen (float32 layer norm, softmax and rotary; weights from model.uri)"
)


def _prefix_pattern(names: Iterable[str]) -> str:
    """Every non-empty prefix of every name, as a trie: `-` in a name matches `-` or `_`."""
    trie: dict[str, Any] = {}
    for name in names:
        node = trie
        for char in name:
            node = node.setdefault(char, {})
    return _alternatives(trie)


def _alternatives(node: dict[str, Any]) -> str:
    branches = []
    for char, child in sorted(node.items()):
        head = "[-_]" if char == "-" else re.escape(char)
        branches.append(f"{head}(?:{_alternatives(child)})?" if child else head)
    return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"


def _flag_pattern(flags: Iterable[str], dashes: str) -> str:
    return dashes + _prefix_pattern(flag[len(dashes) :] for flag in flags)


# One expression, RE2 and Python alike: the CEL rule and the model use this text.
PINNED_ARG_PATTERN = (
    "^(?:"
    + _flag_pattern(PINNED_LONG_FLAGS, "--")
    + "|"
    + _flag_pattern(PINNED_SHORT_FLAGS, "-")
    + r")(?:[=.][\s\S]*)?$"
)
_PINNED_ARG = re.compile(PINNED_ARG_PATTERN)
_CONTROL = re.compile(CONTROL_CHARACTER_PATTERN)


def pinned_flag(arg: str) -> str | None:
    """The pinned flag `arg` would set (in any spelling the engines accept), or None."""
    if not _PINNED_ARG.fullmatch(arg):
        return None
    dashes = "--" if arg.startswith("--") else "-"
    name = re.split(r"[=.]", arg[len(dashes) :], maxsplit=1)[0].replace("_", "-")
    candidates = PINNED_LONG_FLAGS if dashes == "--" else PINNED_SHORT_FLAGS
    matches = [flag for flag in candidates if flag[len(dashes) :].startswith(name)]
    exact = dashes + name
    return exact if exact in matches else matches[0]


def has_control_character(arg: str) -> bool:
    """Whether `arg` holds a control character (refused: see the module doc)."""
    return _CONTROL.search(arg) is not None


def pinned_config_keys(config: Iterable[str]) -> list[str]:
    """The keys of a MindFormers `engine.config` that would override a pinned value."""
    return [key for key in config if key in MINDFORMERS_PINNED_CONFIG_KEYS]
