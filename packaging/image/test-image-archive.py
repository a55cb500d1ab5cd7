"""make test-image's pod image: an arm64 OCI archive made of the image's own dash, sleep and libc (nothing downloaded).

python packaging/image/test-image-archive.py ROOT OUTPUT   # ROOT: the image's arm64 root directory
"""

from __future__ import annotations

import sys
import tarfile
import tempfile
from pathlib import Path

import edgelet.testing.images as im

NAME = "edgelet.local/test-sh:1"
FILES = {
    "bin/sh": "usr/bin/dash",
    "bin/sleep": "usr/bin/sleep",
    "lib/aarch64-linux-gnu/libc.so.6": "usr/lib/aarch64-linux-gnu/libc.so.6",
    "lib/ld-linux-aarch64.so.1": "usr/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1",
}


def main(root: Path, out: Path) -> None:
    entries: list[tuple[tarfile.TarInfo, bytes | None]] = [
        (im._info(d, tarfile.DIRTYPE, 0o755), None) for d in ("bin/", "lib/", "lib/aarch64-linux-gnu/", "tmp/")
    ]
    for dest, src in FILES.items():
        data = (root / src).read_bytes()
        entries.append((im._info(dest, tarfile.REGTYPE, 0o755, len(data)), data))
    tar = im.build_tar(entries)
    layer = im.Layer(tar=tar, blob=im.gzip_bytes(tar))
    im.host_architecture = lambda: "arm64"  # build_config labels the image with it: these are arm64 binaries
    config = im.build_config([layer], {"Cmd": ["/bin/sh"], "Env": ["PATH=/bin"]})
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        im.write_oci_layout(Path(tmp), NAME, [layer], config)
        im.tar_directory(Path(tmp), out)
    print(f"{out}: {NAME}, {out.stat().st_size} bytes")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
