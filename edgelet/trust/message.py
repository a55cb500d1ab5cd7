"""What a signature covers: a body in memory, or a stream read once whose digests were taken as it went past."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Mapping
from typing import BinaryIO

CHUNK = 1 << 20
# Formats that sign the message itself (signify, minisign's legacy "Ed") need it whole in memory:
# past this size an archive must be signed with a prehashing format (minisign's default, SSH).
MAX_WHOLE_BYTES = 64 * 1024 * 1024
_TOO_LARGE = (
    f"larger than {MAX_WHOLE_BYTES} bytes: sign it with minisign (prehashed, its default) "
    "or ssh-keygen -Y sign, which do not need it whole in memory"
)


class Message:
    """A body (`data`), or the `digests` of a message that was streamed (`MessageReader.message`)."""

    def __init__(
        self, data: bytes | None = None, *, digests: Mapping[str, bytes] | None = None, too_large: bool = False
    ) -> None:
        if (data is None) == (digests is None):
            raise TypeError("give data or digests")
        self.data = data
        self._digests: dict[str, bytes] = dict(digests or {})
        self._too_large = too_large

    def digest(self, name: str) -> bytes:
        """hashlib's `name` (blake2b = BLAKE2b-512, sha512, sha256) of the whole message."""
        if name not in self._digests:
            if self.data is None:
                raise ValueError(f"the {name} digest of the message was not taken while it was read")
            self._digests[name] = hashlib.new(name, self.data).digest()
        return self._digests[name]

    def whole(self) -> bytes:
        """The message itself; ValueError past MAX_WHOLE_BYTES (or for a stream that was not kept)."""
        if self.data is None or self._too_large:
            raise ValueError(_TOO_LARGE if self._too_large else "the message was not kept while it was read")
        return self.data


class MessageReader:
    """A stream read once, front to back, by whoever reads through this object: every byte feeds the digests
    asked for (and is kept, up to MAX_WHOLE_BYTES, when the whole message is needed).

    What a signature is then checked against (`message()`) is exactly what the reader passed on, however the
    file behind it changes meanwhile. Reads are serialised: a decompressor's feeding thread and the final
    `drain` may share it.
    """

    def __init__(self, raw: BinaryIO, digests: Iterable[str], *, keep_whole: bool = False) -> None:
        self._raw = raw
        self._hashes = {name: hashlib.new(name) for name in dict.fromkeys(digests)}
        self._kept: bytearray | None = bytearray() if keep_whole else None
        self._too_large = False
        self._lock = threading.Lock()
        self._eof = False
        self.size = 0

    def read(self, n: int = -1, /) -> bytes:
        with self._lock:
            chunk = self._raw.read(n)
            if not chunk:
                self._eof = self._eof or n != 0
                return chunk
            self.size += len(chunk)
            for h in self._hashes.values():
                h.update(chunk)
            if self._kept is not None:
                if len(self._kept) + len(chunk) > MAX_WHOLE_BYTES:
                    self._kept, self._too_large = None, True
                else:
                    self._kept += chunk
            return chunk

    def drain(self) -> None:
        """Read what the consumer left (a tar's end padding, trailing bytes): the digests cover the whole file."""
        while self.read(CHUNK):
            pass

    def hexdigest(self, name: str) -> str:
        """The digest of everything read so far (the whole stream after `drain`)."""
        with self._lock:
            return self._hashes[name].hexdigest()

    def message(self) -> Message:
        """The stream as a signature sees it; ValueError before the end was reached (call `drain` first)."""
        with self._lock:
            if not self._eof:
                raise ValueError("the stream was not read to its end")
            kept = bytes(self._kept) if self._kept is not None else None
            digests = {name: h.digest() for name, h in self._hashes.items()}
        return Message(kept) if kept is not None else Message(digests=digests, too_large=self._too_large)
