"""Validation of OCI runtime config.json documents against the runtime-spec JSON schema (test helper).

The schemas are the v1.1.0 files in shared/specs/oci-runtime-spec (see
SOURCES.md there): draft-04, no `id`s, relative `$ref`s between files, so
every file is registered under its bare file name and the root schema gets
that name as its base URI. Needs jsonschema and referencing (test extras).
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]


class OCISchemaError(ValueError):
    """A document does not validate; `path` is where, as "process.user.uid"."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(f"config.json invalid at {path or '<root>'}: {message}")
        self.path = path


def runtime_schema_dir() -> Path:
    """shared/specs/oci-runtime-spec next to the repository, else $EDGELET_SPECS, else /work/shared/specs."""
    for base in (_REPO.parent / "shared" / "specs", Path(os.environ.get("EDGELET_SPECS", "/work/shared/specs"))):
        if (base / "oci-runtime-spec" / "config-schema.json").is_file():
            return base / "oci-runtime-spec"
    raise FileNotFoundError("oci-runtime-spec schemas not found (set EDGELET_SPECS to shared/specs)")


@lru_cache(maxsize=1)
def _validator():
    from jsonschema import Draft4Validator
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT4

    directory = runtime_schema_dir()
    resources = []
    for file in sorted(directory.glob("*.json")):
        contents = json.loads(file.read_text())
        resources.append((file.name, Resource.from_contents(contents, default_specification=DRAFT4)))
    registry = Registry().with_resources(resources)
    root = json.loads((directory / "config-schema.json").read_text())
    root = {**root, "id": "config-schema.json"}
    return Draft4Validator(root, registry=registry)


def validate_runtime_config(doc: dict) -> None:
    """Raise OCISchemaError naming the first failing path when `doc` is not a valid config.json."""
    validator = _validator()
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        from jsonschema.exceptions import best_match

        err = best_match(errors)
        path = ".".join(str(p) for p in err.absolute_path)
        raise OCISchemaError(err.message, path)
