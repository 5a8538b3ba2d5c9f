"""The -c CONFIG argument and the database to connect to (pepsi.conf(5))."""

from __future__ import annotations

import argparse
import os

DEFAULT_PATH = "/etc/pepsi/pepsi.conf"
"""The configuration file when neither -c nor PEPSI_CONFIG names one."""


class ConfigError(Exception):
    """A usage or configuration error: the program exits 2."""


def config_arg(argv: list[str]) -> str:
    """The file of -c FILE (or -cFILE, --c=FILE) in argv, "" if none; the
    other arguments are the stage's own."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("-c", default="")
    known, _ = p.parse_known_args(argv)
    return str(known.c)


def _value(raw: str) -> str:
    """A value as written after the =: an inline comment (a # or ; after a
    blank) cut, and the quotes of a wholly quoted value removed."""
    v = raw.strip()
    if len(v) >= 2 and v[0] in "\"'" and v[-1] == v[0]:
        return v[1:-1]
    for i, ch in enumerate(v):
        if ch in "#;" and i > 0 and v[i - 1] in " \t":
            return v[:i].strip()
    return v


def ini_dsn(path: str) -> str:
    """[database] DSN of the pepsi.conf at path ("" if it has none); OSError
    if it cannot be read. A minimal reader: the dispatcher has checked the
    file already."""
    section = ""
    with open(path, encoding="utf-8") as f:
        for line in f:
            s = line.strip()
            if not s or s[0] in "#;":
                continue
            if s.startswith("[") and s.endswith("]"):
                section = s[1:-1].strip()
                continue
            key, eq, raw = s.partition("=")
            if eq and section == "database" and key.strip() == "DSN":
                return _value(raw)
    return ""


def resolve_dsn(config_file: str) -> str:
    """The database to connect to: $PEPSI_DSN (which the dispatcher sets),
    else [database] DSN of the file named by -c, $PEPSI_CONFIG or the
    default path, as the pepsi commands resolve it. ConfigError if none."""
    dsn = os.environ.get("PEPSI_DSN", "")
    if dsn:
        return dsn
    path = config_file or os.environ.get("PEPSI_CONFIG", "") or DEFAULT_PATH
    try:
        dsn = ini_dsn(path)
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror or e} (name a file with -c or PEPSI_CONFIG, or set PEPSI_DSN)") from None
    if not dsn:
        raise ConfigError(f"{path}: no database: set [database] DSN in {path} or PEPSI_DSN")
    return dsn
