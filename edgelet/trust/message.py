"""What a signature covers: a body in memory or a file read in chunks, with the digests the formats need."""

from __future__ import annotations

import hashlib
from pathlib import Path

CHUNK = 1 << 20
# Formats that sign the message itself (signify, minisign's legacy "Ed") need it whole in memory:
# past this size an archive must be signed with a prehashing format (minisign's default, SSH).
MAX_WHOLE_BYTES = 64 * 1024 * 1024


class Message:
    """A body (`data`) or a file (`path`); digests are computed once and kept."""

    def __init__(self, data: bytes | None = None, path: Path | None = None) -> None:
        if (data is None) == (path is None):
            raise TypeError("give data or path")
        self.data = data
        self.path = path
        self._digests: dict[str, bytes] = {}

    def digest(self, name: str) -> bytes:
        """hashlib's `name` (blake2b = BLAKE2b-512, sha512, sha256) of the whole message."""
        if name not in self._digests:
            h = hashlib.new(name)
            if self.data is not None:
                h.update(self.data)
            else:
                assert self.path is not None
                with open(self.path, "rb") as f:
                    while chunk := f.read(CHUNK):
                        h.update(chunk)
            self._digests[name] = h.digest()
        return self._digests[name]

    def whole(self) -> bytes:
        """The message itself; ValueError past MAX_WHOLE_BYTES."""
        if self.data is not None:
            return self.data
        assert self.path is not None
        with open(self.path, "rb") as f:
            data = f.read(MAX_WHOLE_BYTES + 1)
        if len(data) > MAX_WHOLE_BYTES:
            raise ValueError(f"larger than {MAX_WHOLE_BYTES} bytes: sign it with minisign (prehashed, its default) "
                             "or ssh-keygen -Y sign, which do not need it whole in memory")
        return data
