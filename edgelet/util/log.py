"""Structured logging: a fixed message plus key=value pairs, as klog does."""

from __future__ import annotations

import logging
import sys
from typing import Any

_CONFIGURED = False


def _fmt(value: Any) -> str:
    text = str(value)
    if not text or any(c in text for c in ' "=\n\t'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


class KVLogger:
    """`log.info("Pod started", pod="default/web", container="app")`."""

    def __init__(self, name: str) -> None:
        self._log = logging.getLogger(name)

    def _emit(self, level: int, msg: str, kv: dict[str, Any], exc_info: Any = None) -> None:
        if not self._log.isEnabledFor(level):
            return
        pairs = " ".join(f"{k}={_fmt(v)}" for k, v in kv.items() if v is not None)
        self._log.log(level, f"{msg} {pairs}" if pairs else msg, exc_info=exc_info)

    def debug(self, msg: str, **kv: Any) -> None:
        self._emit(logging.DEBUG, msg, kv)

    def info(self, msg: str, **kv: Any) -> None:
        self._emit(logging.INFO, msg, kv)

    def warning(self, msg: str, **kv: Any) -> None:
        self._emit(logging.WARNING, msg, kv)

    def error(self, msg: str, exc: BaseException | None = None, **kv: Any) -> None:
        if exc is not None:
            kv = {**kv, "err": f"{type(exc).__name__}: {exc}"}
        self._emit(logging.ERROR, msg, kv)


def get_logger(name: str) -> KVLogger:
    return KVLogger(name)


def configure(verbosity: int = 0) -> None:
    """Log to stderr; -v 0..1 is INFO, 2+ is DEBUG (kubelet's -v levels, roughly)."""
    global _CONFIGURED
    level = logging.DEBUG if verbosity >= 2 else logging.INFO
    root = logging.getLogger()
    if not _CONFIGURED:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname).1s %(name)s] %(message)s"))
        root.addHandler(handler)
        _CONFIGURED = True
    root.setLevel(level)
