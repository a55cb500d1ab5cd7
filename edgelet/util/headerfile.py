"""Header files: `Name: value` lines sent as HTTP headers, read at each request (as `curl -H @file` reads
them), for the manifest URL and the update URL."""

from __future__ import annotations

from pathlib import Path

from edgelet.errors import EdgeletError


class HeaderFileError(EdgeletError):
    """A header file cannot be read or holds a line that is no `Name: value`; the message names the flag, the
    file and the line, never a value."""


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


def read_header_file(path: Path, flag: str) -> list[tuple[str, str]]:
    """The `Name: value` lines of `flag`'s file, read now (a token rotated on disk needs no restart);
    HeaderFileError when it cannot be read, is not UTF-8 text or holds a malformed line."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise HeaderFileError(f"cannot read {flag} {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError:
        # Not chained: the decoder's message quotes a byte of the file, which holds a token.
        raise HeaderFileError(f"{flag} {path}: not UTF-8 text") from None
    try:
        return parse_header_lines(text)
    except ValueError as exc:
        raise HeaderFileError(f"{flag} {path}: {exc}") from exc
