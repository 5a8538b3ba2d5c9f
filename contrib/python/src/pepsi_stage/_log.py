"""The stage's log lines, on stderr (the dispatcher's log): "NAME: LEVEL text"."""

from __future__ import annotations

import sys


class Log:
    """Writes log lines to stderr, each at once. (Not the logging module,
    whose import every worker would pay at start.)"""

    def __init__(self, name: str) -> None:
        self.name = name

    def _line(self, level: str, fmt: str, args: tuple[object, ...]) -> None:
        sys.stderr.write(f"{self.name}: {level} {fmt % args if args else fmt}\n")
        sys.stderr.flush()

    def error(self, fmt: str, *args: object) -> None:
        """An ERROR line: fmt % args."""
        self._line("ERROR", fmt, args)

    def warning(self, fmt: str, *args: object) -> None:
        """A WARNING line: fmt % args."""
        self._line("WARNING", fmt, args)
