"""make test-image's self-update releases: a good and a broken arm64 release of the image's own one-dir, signed.

python packaging/image/test-image-releases.py ROOT OUT [CUTS]   # ROOT: the image's arm64 root directory

In OUT: a throwaway minisign key (release.pub, release.key, no password); the good release (the one-dir the image
runs, under the next version), the broken one (an entry program that exits at start, under the version after) and
CUTS (default 1) more good ones (the one-dir again, each under the next version: the power cuts'), each with its
.minisig. Prints `good=PATH`, `broken=PATH`, `cuts="PATH..."`, `running=N`, `good_version=N`, `broken_version=N`
and `cut_versions="N..."` for the shell. xz's fastest preset: packing at the default took 7 minutes beside the
boots on a loaded 2-core host.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from edgelet.testing.signing import MinisignKey
from edgelet.update import RELEASE_JSON
from edgelet.update.release import archive_name, pack_release
from edgelet.update.stage import read_release

BROKEN = "#!/bin/sh\necho 'image-test: a broken release: exits at start' >&2\nexit 3\n"


def main(root: Path, out: Path, cuts: int = 1) -> None:
    installed = (root / "usr/lib/edgelet/current").resolve()
    info = read_release(installed)
    if info is None:
        raise SystemExit(f"{installed}: no {RELEASE_JSON} (an image without the releases layout)")
    out.mkdir(parents=True, exist_ok=True)
    key = MinisignKey.generate(out, "release")
    good, broken = info.version + 1, info.version + 2
    cut_versions = [broken + 1 + i for i in range(cuts)]
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        # The same frozen one-dir under a newer version: what a second build of this tree would be.
        onedir = Path(tmp, "good")
        shutil.copytree(installed, onedir, symlinks=True)
        (onedir / RELEASE_JSON).unlink()
        bad = Path(tmp, "broken")
        bad.mkdir()
        (bad / "edgelet").write_text(BROKEN)
        (bad / "edgelet").chmod(0o755)
        paths: dict[int, Path] = {}
        releases = [("good", onedir, good), ("broken", bad, broken)] + [("cut", onedir, v) for v in cut_versions]
        for kind, tree, version in releases:
            label = f"image-test-{kind}-{version}"
            paths[version] = out / archive_name(label, info.arch)
            pack_release(tree, paths[version], version=version, arch=info.arch, label=label, preset=0)
            key.sign(paths[version], version=version)
    print(f"good={paths[good]}\nbroken={paths[broken]}")
    print(f'cuts="{" ".join(str(paths[v]) for v in cut_versions)}"')
    print(f"running={info.version}\ngood_version={good}\nbroken_version={broken}")
    print(f'cut_versions="{" ".join(map(str, cut_versions))}"')


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 1)
