"""The worker protocol's lines (pepsi-worker(7)): id lines in, status lines out."""

from __future__ import annotations

import os
import re
import select

HELLO_TOKEN = "hello token"
"""The hello line that asks the dispatcher for pass tokens (protocol 2)."""

HELLO_TRACE = "hello token trace"
"""The hello line that asks for pass tokens and trace contexts (protocol 3)."""

NOT_RUN = 75
"""The status (and exit status) that says the database, not the message, failed."""

_STAGE = re.compile(r"[A-Za-z0-9_.-]{1,63}\Z")
_INT = re.compile(r"[+-]?[0-9]+\Z")
_MAX_LINE = 4096  # an id line has at most 40 characters


def check_stage(name: str) -> bool:
    """Whether name is a stage name: 1 to 63 letters, digits, _ - or ."""
    return bool(_STAGE.match(name))


def parse_id_line(line: bytes) -> tuple[int, int | None]:
    """An id line, "ID", "ID TOKEN" or "ID TOKEN TRACEPARENT": (id, token or
    None); ValueError if bad. trace_of reads its traceparent."""
    fields = line.split()
    if len(fields) > 1 and fields[-1].find(b"-") > 0:
        fields = fields[:-1]
    if not 1 <= len(fields) <= 2:
        raise ValueError(f"id line {quote(line)}: want ID or ID TOKEN")
    nums: list[int] = []
    for f in fields:
        s = f.decode("ascii", "replace")
        if not _INT.match(s) or not 0 < int(s) < 1 << 63:
            raise ValueError(f"id line {quote(line)}: bad " + ("message id" if not nums else "pass token"))
        nums.append(int(s))
    return nums[0], (nums[1] if len(nums) == 2 else None)


def trace_of(line: bytes) -> str | None:
    """The traceparent of the pass's span on an id line, None if it has none."""
    fields = line.split()
    if len(fields) > 1 and fields[-1].find(b"-") > 0:
        return fields[-1].decode("ascii", "replace")
    return None


def quote(b: bytes) -> str:
    """b quoted for a log or status line, at most 64 bytes of it."""
    return repr(b[:64].decode("utf-8", "replace"))


def one_line(text: str) -> str:
    """text on one line: its blanks and newlines collapsed."""
    return " ".join(text.split())


def status_line(code: int, text: str = "", fused: list[tuple[str, float]] | None = None) -> bytes:
    """A status line: "CODE [STAGE=SECONDS ...] [# text]" and a newline."""
    parts = [str(code)]
    for stage, secs in fused or ():
        parts.append(f"{stage}={max(secs, 0.0):.6f}")
    text = one_line(text)
    if text:
        parts.append("# " + text)
    line = " ".join(parts).encode("utf-8", "replace")
    return line[:65536].replace(b"\0", b" ") + b"\n"


def env_protocol() -> int:
    """The protocol version the dispatcher speaks ($PEPSI_PROTOCOL), 0 if none."""
    try:
        return int(os.environ.get("PEPSI_PROTOCOL", ""))
    except ValueError:
        return 0


class LineReader:
    """Reads id lines from a file descriptor, and tells whether the next one
    has come already (ready), without blocking, so that its transaction can
    begin with the last one's COMMIT."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = b""
        self.eof = False

    def _fill(self) -> None:
        data = os.read(self.fd, 65536)
        if data:
            self.buf += data
        else:
            self.eof = True

    def _take(self) -> bytes | None:
        i = self.buf.find(b"\n")
        if i < 0:
            if len(self.buf) > _MAX_LINE:
                self.buf = b""
                return b"line too long"
            if self.eof and self.buf:  # a last line without a newline counts
                line, self.buf = self.buf, b""
                return line.rstrip(b"\r")
            return None
        line, self.buf = self.buf[:i], self.buf[i + 1 :]
        return line.rstrip(b"\r")

    def readline(self) -> bytes | None:
        """The next line, waiting for it; None at end of file."""
        while True:
            line = self._take()
            if line is not None or self.eof:
                return line
            self._fill()

    def ready(self) -> bool:
        """Whether a whole next line is there, without waiting."""
        if b"\n" in self.buf or self.eof:
            return bool(self.buf)
        try:
            readable, _, _ = select.select([self.fd], [], [], 0)
        except (OSError, ValueError):
            return False
        if readable:
            self._fill()
        return b"\n" in self.buf or (self.eof and bool(self.buf))

    def peek(self) -> tuple[int, int | None] | None:
        """The next line's id and token if it has come and parses, else None."""
        if not self.ready():
            return None
        i = self.buf.find(b"\n")
        line = self.buf if i < 0 else self.buf[:i]
        try:
            return parse_id_line(line.rstrip(b"\r"))
        except ValueError:
            return None


class Writer:
    """Writes status lines to a file descriptor, each at once (no buffer)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, line: bytes) -> None:
        """Write line whole; OSError (a broken pipe) if it cannot."""
        view = memoryview(line)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
