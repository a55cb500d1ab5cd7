"""The one zstd reader: layers and `.tar.zst` archives stream through the `zstd` program.

There is no small Python binding for zstd (the `zstandard` wheel would add
24 MB), so `zstd -dc` runs as a child: its stdin is the compressed file
itself when there is one (no copy through Python), else a pipe a thread
fills from the stream; `stdout` is the uncompressed data. zstd keeps its
default 128 MiB window limit: a frame asking for more (`--long=31`) fails
rather than taking that much of a small device's memory.
"""

from __future__ import annotations

import os
import shutil
import threading
from typing import BinaryIO

from edgelet.images.errors import DecompressError
from edgelet.util import proc

MAGIC = b"\x28\xb5\x2f\xfd"
MISSING = "zstd-compressed data needs the zstd program (apt install zstd)"
_GRACE = 2.0  # seconds zstd may take to exit once its output is closed
_CHUNK = 1 << 20


def program() -> str | None:
    """The path of the `zstd` program, None when it is not installed."""
    return shutil.which("zstd")


class ZstdDecoder:
    """`zstd -dc` over `src`, whose first bytes `head` were already read (to see the magic).

    Always end it with `finish()` (after reading `stdout`) or `abort()`: both reap the child.
    """

    def __init__(self, src: BinaryIO, head: bytes) -> None:
        zstd = program()
        if zstd is None:
            raise DecompressError(MISSING)
        fd = _file_fd(src)
        if fd is not None:
            # `src` is buffered: its descriptor is further on than what was read, so point it back at the frame.
            os.lseek(fd, src.tell() - len(head), os.SEEK_SET)
        try:
            self.proc = proc.popen([zstd, "-dcq"], stdin=fd if fd is not None else proc.PIPE)
        except OSError as exc:
            raise DecompressError(f"cannot start {zstd}: {exc.strerror}") from exc
        assert self.proc.stdout is not None
        self.stdout: BinaryIO = self.proc.stdout  # type: ignore[assignment]
        self.feed_error: BaseException | None = None
        self.feeder: threading.Thread | None = None
        if fd is None:
            self.feeder = threading.Thread(target=self._feed, args=(src, head), name="zstd-feed", daemon=True)
            self.feeder.start()

    def _feed(self, src: BinaryIO, head: bytes) -> None:
        pipe = self.proc.stdin
        assert pipe is not None
        try:
            pipe.write(head)
            shutil.copyfileobj(src, pipe, _CHUNK)
        except BrokenPipeError:
            pass  # zstd stopped reading: it failed or was stopped, and its exit status says so
        except (OSError, ValueError) as exc:
            self.feed_error = exc
        finally:
            try:
                pipe.close()
            except BrokenPipeError:
                pass

    def _reap(self, *, wait: bool) -> str:
        """Close the output, let zstd exit (up to _GRACE when `wait`) or kill it, and reap it;
        its stderr tail when it failed by itself, else ""."""
        assert self.proc.stderr is not None
        self.stdout.close()  # a zstd still writing gets EPIPE and stops
        if wait:
            try:
                self.proc.wait(timeout=_GRACE)
            except proc.TimeoutExpired:
                self.proc.kill()
        else:
            self.proc.kill()
        err = self.proc.stderr.read()[-500:].decode(errors="replace").strip()
        err = err.replace("/*stdin*\\ : ", "").replace("/*stdin*\\: ", "")  # zstd's name for its input
        self.proc.stderr.close()
        self.proc.wait()
        if self.feeder is not None:
            self.feeder.join(timeout=_GRACE)
        if self.proc.returncode > 0:  # negative: a signal, ours (SIGKILL) or the EPIPE we caused (SIGPIPE)
            return err or f"zstd exited with status {self.proc.returncode}"
        return ""

    def abort(self, *, wait: bool) -> str:
        """Stop after an error (`wait` False: at once, for a cancellation); zstd's complaint if it had one."""
        return self._reap(wait=wait)

    def finish(self) -> None:
        """After the data was read: drain what is left (a tar's end padding), reap zstd, and raise
        DecompressError unless zstd and the feeder succeeded."""
        while self.stdout.read(_CHUNK):
            pass
        failed = self._reap(wait=True)
        if self.feed_error is not None:
            raise DecompressError(f"cannot read the compressed data: {self.feed_error}") from self.feed_error
        if self.proc.returncode != 0:
            raise DecompressError(f"corrupt zstd stream: {failed or f'zstd ended by signal {-self.proc.returncode}'}")


def _file_fd(src: BinaryIO) -> int | None:
    """The descriptor of a seekable file behind `src`, None for an in-memory or piped stream."""
    try:
        fd = src.fileno()
        os.lseek(fd, 0, os.SEEK_CUR)
        src.tell()
    except (AttributeError, OSError, ValueError):
        return None
    return fd
