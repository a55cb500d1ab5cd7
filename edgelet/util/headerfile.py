"""Header files: `Name: value` lines sent as HTTP headers, read at each request (as `curl -H @file` reads
them), for the manifest URL and the update URL."""

from __future__ import annotations

from pathlib import Path


def parse_header_lines(text: str) -> list[tuple[str, str]]:
    """`Name: value` per line (blank lines and `#` comments skipped), as `curl -H @file` reads them."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, value = line.partition(":")
        name = name.strip()
        if not sep or not name or any(c in name for c in " \t"):
            raise ValueError(f"line {number}: expected `Name: value`")
        out.append((name, value.strip()))
    return out


def read_header_file(path: Path) -> list[tuple[str, str]]:
    """A header file's `Name: value` lines, read now (a token rotated on disk needs no restart). OSError when it
    cannot be read; ValueError naming the line, never a value, when it is malformed or not UTF-8 text."""
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        # Not chained: the decoder's message quotes a byte of the file, which holds a token.
        raise ValueError("not UTF-8 text") from None
    return parse_header_lines(text)
