"""Which layer media types a pull accepts: gzip, zstd (when the zstd program is installed) and uncompressed."""

from __future__ import annotations

import pytest

from edgelet.images.puller import check_image_manifest

CONFIG = {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:" + "c" * 64, "size": 10}


def manifest(media_type: str) -> dict:
    return {
        "schemaVersion": 2,
        "config": CONFIG,
        "layers": [{"mediaType": media_type, "digest": "sha256:" + "a" * 64, "size": 5}],
    }


@pytest.mark.parametrize(
    "media_type, zstd, error",
    [
        ("application/vnd.oci.image.layer.v1.tar", False, None),
        ("application/vnd.oci.image.layer.v1.tar+gzip", False, None),
        ("application/vnd.docker.image.rootfs.diff.tar.gzip", False, None),
        ("application/vnd.oci.image.layer.v1.tar+zstd", True, None),
        ("application/vnd.oci.image.layer.nondistributable.v1.tar+zstd", True, None),
        ("application/vnd.docker.image.rootfs.diff.tar.zstd", True, None),
        (
            "application/vnd.oci.image.layer.v1.tar+zstd",
            False,
            r"is zstd-compressed \(application/vnd.oci.image.layer.v1.tar\+zstd\): zstd-compressed data needs the zstd program "
            r"\(apt install zstd\)",
        ),
        ("application/vnd.docker.image.rootfs.diff.tar.zstd", False, "zstd-compressed data needs the zstd program"),
        ("application/vnd.oci.image.layer.v1.tar+bzip2", True, "unsupported media type"),
    ],
)
def test_layer_media_types(media_type: str, zstd: bool, error: str | None) -> None:
    if error is None:
        _, layers = check_image_manifest(manifest(media_type), zstd=zstd)
        assert layers[0]["mediaType"] == media_type
    else:
        with pytest.raises(ValueError, match=error):
            check_image_manifest(manifest(media_type), zstd=zstd)
