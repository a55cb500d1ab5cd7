"""`edgelet version`: edgelet's own version and build commit, and those of the runtime and conmon."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from edgelet import BUILD_COMMIT, __version__
from edgelet.cli.common import EXIT_OK, tool_version
from edgelet.settings import Settings


def cmd_version(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    print(f"edgelet {__version__} (commit {BUILD_COMMIT})", file=out)
    print(f"{Path(settings.runtime).name}: {tool_version(settings.runtime)}", file=out)
    print(f"{Path(settings.conmon).name}: {tool_version(settings.conmon)}", file=out)
    return EXIT_OK
