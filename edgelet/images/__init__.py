"""Local images: references (reference.py), the content store (store.py), archive import (archive.py), safe layer unpacking (unpack.py).

Import `edgelet.images.store.ImageStore` for the store; this package itself only re-exports the
light-weight types and errors so importing it costs nothing.
"""

from edgelet.images.errors import ImageError, ImageNotFound, InvalidReference
from edgelet.images.types import ImageConfig, ImageRecord

__all__ = ["ImageConfig", "ImageError", "ImageNotFound", "ImageRecord", "InvalidReference"]
