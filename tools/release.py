#!/usr/bin/env python3
"""Builds edgelet's self-update artifacts from a frozen one-dir (docs/self-update.md).

    tools/release.py pack ONEDIR OUTDIR [--arch A] [--label L] [--version N]   the release archive, its path printed
    tools/release.py describe ONEDIR [--arch A] [--label L] [--version N]      release.json on stdout (the .deb's)

Defaults: the label is edgelet/__init__.py's __version__, the version its release number (0.1.0 -> 1000), the
arch this machine's (Debian names). Sign the archive afterwards: `minisign -S -m ARCHIVE -t 'edgelet-version: N'`
or `ssh-keygen -Y sign -n edgelet-release -f KEY ARCHIVE`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import msgspec

from edgelet import BUILD_COMMIT, __version__
from edgelet.update.release import (
    ReleaseInfo,
    archive_name,
    describe_tree,
    own_arch,
    pack_release,
    release_number,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("pack", "describe"))
    parser.add_argument("onedir", type=Path)
    parser.add_argument("outdir", type=Path, nargs="?")
    parser.add_argument("--arch", default=own_arch())
    parser.add_argument("--label", default=__version__)
    parser.add_argument("--version", type=int)
    parser.add_argument("--commit", default=BUILD_COMMIT)
    args = parser.parse_args()
    version = args.version if args.version is not None else release_number(args.label)
    if not (args.onedir / "edgelet").is_file():
        parser.error(f"{args.onedir}/edgelet: not a one-dir build (make binary-onedir)")
    if args.action == "describe":
        info = ReleaseInfo(
            version=version, label=args.label, arch=args.arch, commit=args.commit, files=describe_tree(args.onedir)
        )
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(info), indent=1).decode() + "\n")
        return 0
    if args.outdir is None:
        parser.error("pack needs OUTDIR")
    args.outdir.mkdir(parents=True, exist_ok=True)
    out = args.outdir / archive_name(args.label, args.arch)
    pack_release(args.onedir, out, version=version, arch=args.arch, label=args.label, commit=args.commit)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
