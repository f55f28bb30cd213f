#!/usr/bin/env python3
"""The rooms that hold decisions stay small enough to read: no module over 450 lines.

`make lint` runs this over the folders where a file past that size has meant several
concerns in one module (plan/, controllers/, runner/, parity/, report/). A module that
grows past the limit is split by concern, not waived here.

    hack/room-sizes.py [ROOT]      ROOT is the product's source root (default: operator)
"""

from __future__ import annotations

import sys
from pathlib import Path

LIMIT = 450
ROOMS = ("plan", "controllers", "runner", "parity", "report")


def oversized(root: Path) -> list[tuple[Path, int]]:
    """Every module of a room with more than LIMIT lines, with its line count."""
    found = []
    for room in ROOMS:
        for path in sorted((root / "infergate" / room).rglob("*.py")):
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > LIMIT:
                found.append((path, lines))
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else "operator")
    found = oversized(root)
    for path, lines in found:
        sys.stdout.write(f"{path}: {lines} lines, over the {LIMIT}-line limit of its room: ")
        sys.stdout.write("split it by concern\n")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
