"""`edgelet version`: edgelet's own version and build commit, and those of the runtime handlers and conmon."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from edgelet import BUILD_COMMIT, __version__
from edgelet.cli.common import EXIT_OK, tool_version
from edgelet.settings import Settings


def source_commit() -> str:
    """The frozen build's commit; in a git checkout, the checkout's (`dev` only outside both)."""
    if BUILD_COMMIT != "dev":
        return BUILD_COMMIT
    repo = Path(__file__).resolve().parents[2]
    if not (repo / ".git").exists():
        return BUILD_COMMIT
    from edgelet.util.proc import output

    head = output(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], timeout=5)
    if not head:
        return BUILD_COMMIT
    dirty = output(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"], timeout=5)
    return head.strip() + ("-dirty" if dirty else "")


def cmd_version(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    print(f"edgelet {__version__} (commit {source_commit()})", file=out)
    print(f"{Path(settings.runtime).name}: {tool_version(settings.runtime)}", file=out)
    from edgelet.runtime.handlers import resolve_handlers

    # The other runtime handlers (crun where installed, and the configured ones), by name.
    for name, cfg in sorted(resolve_handlers(settings.runtime_handlers, settings.runtime).items()):
        if name != "runc":
            print(f"{name}: {tool_version(cfg.path)}", file=out)
    print(f"{Path(settings.conmon).name}: {tool_version(settings.conmon)}", file=out)
    return EXIT_OK
