"""Errors raised while turning manifests into static pods.

Hierarchy (all are ValueError, so callers may catch that instead)::

    ApiError(ValueError)
    ├── ManifestDecodeError   parse_manifests: bad YAML/JSON, wrong kind, wrong field type
    └── ValidationError       make_static_pod: invalid pod or a reference to an API object

`str(err)` is the message users see, already naming the document and field
path (`$.spec.containers[0].ports[0].containerPort: expected int, got str`);
the origin (file path or URL) is an attribute, because ManifestProblem carries
it separately.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgelet.errors import EdgeletError


@dataclass(frozen=True)
class FieldError:
    """One problem with one field: `path` is a JSONPath such as `$.spec.volumes[1].secret`."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class ApiError(EdgeletError, ValueError):
    """Base of all errors of edgelet.api."""

    def __init__(self, message: str, *, origin: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.origin = origin


class ManifestDecodeError(ApiError):
    """A manifest could not be decoded into v1 Pods.

    `document` is the 0-based index of the YAML document (None for single
    documents), `path` the field path when the problem is in one field, and
    `line`/`column` (1-based) the position in the file when it is known.
    """

    def __init__(
        self,
        message: str,
        *,
        origin: str = "",
        document: int | None = None,
        path: str | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        super().__init__(message, origin=origin)
        self.document = document
        self.path = path
        self.line = line
        self.column = column


class ValidationError(ApiError):
    """A decoded pod that cannot run as a static pod; `errors` lists every problem found."""

    def __init__(self, errors: list[FieldError], *, origin: str = "", pod: str | None = None) -> None:
        super().__init__("; ".join(str(e) for e in errors), origin=origin)
        self.errors = list(errors)
        self.pod = pod
