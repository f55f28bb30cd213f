"""A small Dockerfile reader for tests: instructions, build args, stages and the
`infergate` command lines an image runs (exec-form ENTRYPOINT/CMD and RUN)."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

_SHELL_SEPARATORS = re.compile(r"&&|\|\||;|\|")
_REDIRECT = re.compile(r"^\d*(>>|>|<)")
_REDIRECT_ALONE = re.compile(r"^\d*(>>|>|<)$")
_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")


@dataclass(frozen=True)
class Instruction:
    """One instruction, continuation lines joined, with the line it starts on."""

    keyword: str
    value: str
    line: int


@dataclass
class Dockerfile:
    """A parsed Dockerfile."""

    path: Path
    instructions: list[Instruction] = field(default_factory=list)

    @classmethod
    def read(cls, path: Path) -> Dockerfile:
        parsed = cls(path)
        pending: list[str] = []
        start = 0
        for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            stripped = raw.strip()
            if not pending and (not stripped or stripped.startswith("#")):
                continue
            if pending and stripped.startswith("#"):
                continue
            if not pending:
                start = number
            continued = stripped.endswith("\\")
            pending.append(stripped[:-1].strip() if continued else stripped)
            if not continued:
                text = " ".join(part for part in pending if part)
                keyword, _, value = text.partition(" ")
                parsed.instructions.append(Instruction(keyword.upper(), value.strip(), start))
                pending = []
        return parsed

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def build_args(self) -> dict[str, str]:
        """ARG defaults (`ARG NAME=value`), in order; a later default wins."""
        args: dict[str, str] = {}
        for instruction in self.all("ARG"):
            name, sep, default = instruction.value.partition("=")
            if sep:
                args[name.strip()] = default.strip().strip('"')
        return args

    def substitute(self, text: str) -> str:
        args = self.build_args()
        return _VARIABLE.sub(lambda m: args.get(m.group(1) or m.group(2), m.group(0)), text)

    def stages(self) -> list[tuple[str, str | None]]:
        """(base image with build args substituted, stage name) per FROM."""
        result = []
        for instruction in self.all("FROM"):
            words = [w for w in instruction.value.split() if not w.startswith("--platform")]
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            result.append((self.substitute(words[0]), name))
        return result

    def external_bases(self) -> list[str]:
        """Base images pulled from a registry (FROM lines that name no earlier stage)."""
        names: set[str] = set()
        bases = []
        for image, name in self.stages():
            if image not in names:
                bases.append(image)
            if name:
                names.add(name)
        return bases

    def final_user(self) -> str | None:
        """The USER in effect in the final stage, if any."""
        user = None
        for instruction in self.instructions:
            if instruction.keyword == "FROM":
                user = None
            elif instruction.keyword == "USER":
                user = instruction.value
        return user

    def final_exec(self, keyword: str) -> list[str] | None:
        """The final stage's ENTRYPOINT or CMD in exec (JSON) form; None when absent."""
        found: list[str] | None = None
        for instruction in self.instructions:
            if instruction.keyword == "FROM":
                found = None
            elif instruction.keyword == keyword:
                value = json.loads(instruction.value)
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise ValueError(f"{self.path}:{instruction.line}: {keyword} is not exec form")
                found = value
        return found

    def container_command(self) -> list[str]:
        """What the container runs by default: ENTRYPOINT followed by CMD."""
        return [*(self.final_exec("ENTRYPOINT") or []), *(self.final_exec("CMD") or [])]

    def copy_sources(self) -> list[str]:
        """Sources of COPY/ADD from the build context (not `--from=` another stage)."""
        sources = []
        for instruction in [*self.all("COPY"), *self.all("ADD")]:
            words = shlex.split(instruction.value)
            if any(w.startswith("--from=") for w in words):
                continue
            sources += [w for w in words if not w.startswith("--")][:-1]
        return sources


def infergate_calls(shell: str, program: str = "infergate") -> list[list[str]]:
    """The argument lists of every `program ...` in a shell command line."""
    calls = []
    for segment in _SHELL_SEPARATORS.split(shell):
        words = shlex.split(segment)
        if not words or words[0] != program:
            continue
        argv: list[str] = []
        skip_next = False
        for word in words[1:]:
            if skip_next:
                skip_next = False
            elif _REDIRECT.match(word):
                # `> /dev/null` takes the next word; `>/dev/null` and `2>&1` are one word.
                skip_next = _REDIRECT_ALONE.match(word) is not None
            else:
                argv.append(word)
        calls.append(argv)
    return calls
