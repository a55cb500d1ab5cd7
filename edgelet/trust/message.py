"""What a signature covers: a body in memory or a file read in chunks, with the digests the formats need."""

from __future__ import annotations

import hashlib
from typing import BinaryIO

CHUNK = 1 << 20
# Formats that sign the message itself (signify, minisign's legacy "Ed") need it whole in memory:
# past this size an archive must be signed with a prehashing format (minisign's default, SSH).
MAX_WHOLE_BYTES = 64 * 1024 * 1024


class Message:
    """A body (`data`), or a file open for reading (`file`, read from its start); digests are computed once and
    kept. The file is one descriptor: what is verified is what that descriptor reads, whatever the path names
    by then."""

    def __init__(self, data: bytes | None = None, file: BinaryIO | None = None) -> None:
        if (data is None) == (file is None):
            raise TypeError("give data or file")
        self.data = data
        self.file = file
        self._digests: dict[str, bytes] = {}

    def compute(self, *names: str) -> None:
        """Each of hashlib's `names` of the whole message, in one read of the file."""
        missing = [n for n in names if n not in self._digests]
        if not missing:
            return
        hashes = [hashlib.new(n) for n in missing]
        if self.data is not None:
            for h in hashes:
                h.update(self.data)
        else:
            assert self.file is not None
            self.file.seek(0)
            while chunk := self.file.read(CHUNK):
                for h in hashes:
                    h.update(chunk)
        for name, h in zip(missing, hashes):
            self._digests[name] = h.digest()

    def digest(self, name: str) -> bytes:
        """hashlib's `name` (blake2b = BLAKE2b-512, sha512, sha256) of the whole message."""
        self.compute(name)
        return self._digests[name]

    def whole(self) -> bytes:
        """The message itself; ValueError past MAX_WHOLE_BYTES."""
        if self.data is not None:
            return self.data
        assert self.file is not None
        self.file.seek(0)
        data = self.file.read(MAX_WHOLE_BYTES + 1)
        if len(data) > MAX_WHOLE_BYTES:
            raise ValueError(
                f"larger than {MAX_WHOLE_BYTES} bytes: sign it with minisign (prehashed, its default) "
                "or ssh-keygen -Y sign, which do not need it whole in memory"
            )
        return data
