"""Builds small, deterministic busybox test images (OCI layout, OCI archive, docker archive) without a registry.

Usage from tests::

    archive = build_busybox_image(tmp_path / "bb.tar", name="edgelet.local/busybox:1.36")
    archive = build_busybox_image(tmp_path / "bb.tar", config={"Cmd": ["sleep", "3600"]},
                                  extra_layers=[{"etc/motd": b"hi\\n", "bin/ls": None}])

and from the command line (the Makefile calls exactly this)::

    python -m edgelet.testing.images --format oci-archive --name edgelet.local/busybox:1.36 \
        --output build/images/busybox-1.36.oci.tar

An extra layer maps a path to its content; `None` makes a whiteout (`.wh.<name>`) that hides
the path from lower layers, and a key `dir/.wh..wh..opq` with any content makes `dir` opaque.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

ImageFormat = Literal["oci-layout", "oci-archive", "docker-archive"]

BUSYBOX = Path("/bin/busybox")
MTIME = 1_700_000_000  # fixed so that the same inputs always give the same digests
CREATED = "2023-11-14T22:13:20Z"  # MTIME as RFC 3339
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

APPLETS = (
    "[",
    "awk",
    "basename",
    "cat",
    "chmod",
    "chown",
    "cp",
    "cut",
    "date",
    "dd",
    "df",
    "dirname",
    "du",
    "echo",
    "env",
    "expr",
    "false",
    "find",
    "grep",
    "head",
    "hostname",
    "httpd",
    "id",
    "ip",
    "kill",
    "ln",
    "ls",
    "mkdir",
    "mkfifo",
    "mktemp",
    "mount",
    "mv",
    "nc",
    "nslookup",
    "printf",
    "ps",
    "pwd",
    "readlink",
    "rm",
    "rmdir",
    "sed",
    "seq",
    "sh",
    "sleep",
    "sort",
    "stat",
    "stty",
    "tail",
    "tee",
    "test",
    "tar",
    "timeout",
    "top",
    "touch",
    "tr",
    "true",
    "tty",
    "uname",
    "uniq",
    "wc",
    "wget",
    "which",
    "whoami",
    "xargs",
    "yes",
)
PASSWD = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n"
GROUP = b"root:x:0:\nnobody:x:65534:\n"

MT_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
ANN_REF_NAME = "org.opencontainers.image.ref.name"
ANN_IMAGE_NAME = "io.containerd.image.name"

_CONFIG_KEYS = ("Entrypoint", "Cmd", "Env", "User", "WorkingDir", "StopSignal", "Labels", "ExposedPorts", "Volumes")


def host_architecture() -> str:
    """This machine's architecture in OCI terms (the host busybox is copied, so the image matches)."""
    machine = platform.machine().lower()
    return {
        "x86_64": "amd64",
        "amd64": "amd64",
        "aarch64": "arm64",
        "arm64": "arm64",
        "armv7l": "arm",
        "armv6l": "arm",
        "i686": "386",
        "i386": "386",
        "riscv64": "riscv64",
        "ppc64le": "ppc64le",
        "s390x": "s390x",
    }.get(machine, machine)


@dataclass(frozen=True)
class Layer:
    """One built layer: the uncompressed tar (whose sha256 is the diffID) and its gzip'd blob."""

    tar: bytes
    blob: bytes

    @property
    def diff_id(self) -> str:
        return "sha256:" + hashlib.sha256(self.tar).hexdigest()

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.blob).hexdigest()


def _info(name: str, kind: bytes, mode: int, size: int = 0, linkname: str = "") -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.mode = mode
    ti.size = size
    ti.linkname = linkname
    ti.mtime = MTIME
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


def gzip_bytes(data: bytes) -> bytes:
    """Deterministic gzip (no file name, fixed header mtime)."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=6) as gz:
        gz.write(data)
    return buf.getvalue()


def build_tar(entries: Sequence[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    """A tar of the given (header, content) pairs, in the order given; for hostile-tar tests too."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def build_layer(files: Mapping[str, bytes | None], *, busybox: bool = False) -> Layer:
    """A layer with `files` (path -> content, None = whiteout), parents created as 0755 dirs; sorted."""
    members: dict[str, tuple[tarfile.TarInfo, bytes | None]] = {}

    def add_dir(path: str, mode: int = 0o755) -> None:
        members.setdefault(path + "/", (_info(path + "/", tarfile.DIRTYPE, mode), None))

    def add_parents(path: str) -> None:
        for parent in reversed(PurePosixPath(path).parents):
            if str(parent) != ".":
                add_dir(str(parent))

    if busybox:
        for d in ("bin", "dev", "etc", "home", "proc", "root", "sys", "usr", "usr/bin", "usr/sbin", "var"):
            add_dir(d, 0o700 if d == "root" else 0o755)
        add_dir("tmp", 0o1777)
        data = BUSYBOX.read_bytes()
        members["bin/busybox"] = (_info("bin/busybox", tarfile.REGTYPE, 0o755, len(data)), data)
        for applet in APPLETS:
            members[f"bin/{applet}"] = (_info(f"bin/{applet}", tarfile.SYMTYPE, 0o777, linkname="busybox"), None)
        members["etc/passwd"] = (_info("etc/passwd", tarfile.REGTYPE, 0o644, len(PASSWD)), PASSWD)
        members["etc/group"] = (_info("etc/group", tarfile.REGTYPE, 0o644, len(GROUP)), GROUP)

    for raw, content in files.items():
        path = raw.strip("/")
        add_parents(path)
        if content is None:
            p = PurePosixPath(path)
            name = str(p.parent / f".wh.{p.name}") if str(p.parent) != "." else f".wh.{p.name}"
            members[name] = (_info(name, tarfile.REGTYPE, 0o644), b"")
        else:
            members[path] = (_info(path, tarfile.REGTYPE, 0o644, len(content)), content)

    tar = build_tar([members[k] for k in sorted(members)])
    return Layer(tar=tar, blob=gzip_bytes(tar))


def _split_name(name: str) -> tuple[str, str]:
    """("repo", "tag") of a reference; the tag is "latest" when the name has none."""
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = name.rsplit(":", 1)
        return repo, tag
    return name, "latest"


def _canonical(doc: object) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def build_config(layers: Sequence[Layer], config: Mapping[str, object] | None) -> bytes:
    """The image config JSON: Cmd ["sh"], a PATH, and the caller's overrides."""
    cfg: dict[str, object] = {"Cmd": ["sh"], "Env": [DEFAULT_PATH]}
    for key, value in (config or {}).items():
        if key not in _CONFIG_KEYS:
            raise ValueError(f"unsupported image config key {key!r} (one of {', '.join(_CONFIG_KEYS)})")
        cfg[key] = value
    doc = {
        "architecture": host_architecture(),
        "os": "linux",
        "created": CREATED,
        "config": cfg,
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
        "history": [{"created": CREATED, "created_by": "edgelet.testing.images"} for _ in layers],
    }
    return _canonical(doc)


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (MTIME, MTIME))


def write_oci_layout(directory: Path, name: str, layers: Sequence[Layer], config_json: bytes) -> str:
    """Write an OCI image layout into `directory`; returns the manifest digest."""
    manifest = _canonical(
        {
            "schemaVersion": 2,
            "mediaType": MT_OCI_MANIFEST,
            "config": {"mediaType": MT_OCI_CONFIG, "digest": _sha(config_json), "size": len(config_json)},
            "layers": [{"mediaType": MT_OCI_LAYER_GZIP, "digest": la.digest, "size": len(la.blob)} for la in layers],
        }
    )
    blobs = directory / "blobs" / "sha256"
    for data in (config_json, manifest, *(la.blob for la in layers)):
        _write(blobs / hashlib.sha256(data).hexdigest(), data)
    _, tag = _split_name(name)
    index = _canonical(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": MT_OCI_MANIFEST,
                    "digest": _sha(manifest),
                    "size": len(manifest),
                    "annotations": {ANN_REF_NAME: tag, ANN_IMAGE_NAME: name},
                    "platform": {"architecture": host_architecture(), "os": "linux"},
                }
            ],
        }
    )
    _write(directory / "index.json", index)
    _write(directory / "oci-layout", _canonical({"imageLayoutVersion": "1.0.0"}))
    return _sha(manifest)


def tar_directory(directory: Path, output: Path, *, compress: bool = False) -> None:
    """Deterministically tar the contents of `directory` (sorted, fixed owners and mtimes)."""
    entries: list[tuple[tarfile.TarInfo, bytes | None]] = []
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        rel_root = Path(root).relative_to(directory)
        if str(rel_root) != ".":
            entries.append((_info(rel_root.as_posix() + "/", tarfile.DIRTYPE, 0o755), None))
        for f in sorted(files):
            data = (Path(root) / f).read_bytes()
            entries.append((_info((rel_root / f).as_posix(), tarfile.REGTYPE, 0o644, len(data)), data))
    data = build_tar(entries)
    output.write_bytes(gzip_bytes(data) if compress else data)


def write_docker_archive(output: Path, name: str, layers: Sequence[Layer], config_json: bytes) -> None:
    """A `docker save`-style archive: manifest.json, repositories, <id>.json, <n>/layer.tar (uncompressed)."""
    config_hex = hashlib.sha256(config_json).hexdigest()
    entries: list[tuple[tarfile.TarInfo, bytes | None]] = []

    def add(path: str, data: bytes) -> None:
        entries.append((_info(path, tarfile.REGTYPE, 0o644, len(data)), data))

    layer_paths = []
    for la in layers:
        hex_ = la.diff_id.split(":", 1)[1]
        entries.append((_info(hex_ + "/", tarfile.DIRTYPE, 0o755), None))
        add(f"{hex_}/layer.tar", la.tar)
        add(f"{hex_}/VERSION", b"1.0")
        layer_paths.append(f"{hex_}/layer.tar")
    add(f"{config_hex}.json", config_json)
    repo, tag = _split_name(name)
    top = layers[-1].diff_id.split(":", 1)[1]
    add(
        "manifest.json",
        json.dumps([{"Config": f"{config_hex}.json", "RepoTags": [name], "Layers": layer_paths}]).encode(),
    )
    add("repositories", json.dumps({repo: {tag: top}}).encode())
    output.write_bytes(build_tar(entries))


def build_busybox_image(
    output: Path,
    *,
    name: str = "edgelet.local/busybox:1.36",
    fmt: ImageFormat = "oci-archive",
    config: dict | None = None,
    extra_layers: Sequence[Mapping[str, bytes | None]] = (),
) -> Path:
    """Build a busybox image at `output` (a file, or a directory for "oci-layout"); returns `output`."""
    output = Path(output)
    layers = [build_layer({}, busybox=True), *(build_layer(extra) for extra in extra_layers)]
    config_json = build_config(layers, config)
    output.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "oci-layout":
        if output.exists():
            shutil.rmtree(output)
        write_oci_layout(output, name, layers, config_json)
    elif fmt == "oci-archive":
        with tempfile.TemporaryDirectory(dir=output.parent, prefix=".oci-") as tmp:
            write_oci_layout(Path(tmp), name, layers, config_json)
            tar_directory(Path(tmp), output)
    elif fmt == "docker-archive":
        write_docker_archive(output, name, layers, config_json)
    else:
        raise ValueError(f"unknown image format {fmt!r}")
    return output


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--format", dest="fmt", default="oci-archive", choices=("oci-layout", "oci-archive", "docker-archive")
    )
    parser.add_argument("--name", default="edgelet.local/busybox:1.36")
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument("--cmd", nargs="+", help="override the image Cmd")
    args = parser.parse_args(argv)
    config = {"Cmd": args.cmd} if args.cmd else None
    out = build_busybox_image(args.output, name=args.name, fmt=args.fmt, config=config)
    print(out)


if __name__ == "__main__":
    main()
