"""Generate edgelet/api/types.py (msgspec Structs) from the Kubernetes OpenAPI v3 documents.

Usage:
    python tools/gen_k8s_types.py [CORE_OPENAPI] [COORDINATION_OPENAPI] [OUTPUT]

Defaults: ../shared/specs/kubernetes/api__v1_openapi.json and
../shared/specs/kubernetes/apis__coordination.k8s.io__v1_openapi.json relative
to the repository root, and edgelet/api/types.py.  Stdlib only, so it runs
without the virtualenv.
"""

from __future__ import annotations

import json
import keyword
import re
import sys
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CORE = REPO.parent / "shared" / "specs" / "kubernetes" / "api__v1_openapi.json"
DEFAULT_COORD = REPO.parent / "shared" / "specs" / "kubernetes" / "apis__coordination.k8s.io__v1_openapi.json"
DEFAULT_OUTPUT = REPO / "edgelet" / "api" / "types.py"

ROOTS = (
    "io.k8s.api.core.v1.Pod",
    "io.k8s.api.core.v1.PodList",
    "io.k8s.api.core.v1.Node",
    "io.k8s.api.coordination.v1.Lease",
)

# Schemas that become plain Python types rather than Structs.
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
TIMES = (
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time",
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime",
)
SCALAR_ALIASES = {
    INT_OR_STRING: "int | str",
    # Kubernetes accepts bare numbers for quantities (`cpu: 1`, `memory: 1e9`).
    QUANTITY: "str | int | float",
    TIMES[0]: "str",
    TIMES[1]: "str",
}

# When two reachable schemas share a last component, the one from the
# earliest package in this list keeps the short name; the others are
# qualified with their group and version (CoordinationV1Foo).
PACKAGE_PRIORITY = (
    "io.k8s.api.core.v1.",
    "io.k8s.apimachinery.pkg.apis.meta.v1.",
)

# Names used inside annotations; a field with one of these names would shadow
# it when msgspec resolves the (postponed) annotations in the class namespace.
RESERVED_ATTRS = frozenset({"int", "str", "float", "bool", "list", "dict", "Any", "msgspec"})

_REF_PREFIX = "#/components/schemas/"
_TOKEN = re.compile(
    r"[A-Z]+s(?=[A-Z]|$)"  # plural acronym: IPs, CIDRs
    r"|[A-Z]+(?=[A-Z][a-z]|$)"  # acronym: IP, PID, UUID
    r"|[A-Z]?[a-z0-9]+"  # ordinary word
)


def snake_case(json_name: str) -> str:
    """Map a JSON name to a Python attribute: hostIP -> host_ip, podIPs -> pod_ips."""
    tokens = _TOKEN.findall(json_name)
    if "".join(tokens) != json_name:
        raise ValueError(f"cannot convert property name {json_name!r} to snake_case")
    name = "_".join(t.lower() for t in tokens)
    # Soft keywords (match, type, ...) are valid attribute names and stay as they are.
    if keyword.iskeyword(name) or name in RESERVED_ATTRS:
        name += "_"
    return name


def load_schemas(paths: Iterable[Path]) -> dict[str, dict]:
    """Merge components.schemas of all documents; the first definition of a name wins."""
    schemas: dict[str, dict] = {}
    for path in paths:
        doc = json.loads(path.read_text(encoding="utf-8"))
        for name, schema in doc["components"]["schemas"].items():
            schemas.setdefault(name, schema)
    return schemas


def _refs(node: object) -> Iterable[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            yield ref.removeprefix(_REF_PREFIX)
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def reachable(schemas: dict[str, dict], roots: Iterable[str]) -> list[str]:
    """Names of all schemas reachable from the roots, sorted."""
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        if name not in schemas:
            raise KeyError(f"schema {name!r} is referenced but not defined")
        seen.add(name)
        stack.extend(_refs(schemas[name].get("properties", {})))
    return sorted(seen)


def is_struct(schema: dict) -> bool:
    return schema.get("type") == "object" and bool(schema.get("properties"))


def class_names(names: Iterable[str]) -> dict[str, str]:
    """Assign a unique, deterministic class name to every struct schema."""
    by_short: dict[str, list[str]] = {}
    for name in names:
        by_short.setdefault(name.rsplit(".", 1)[1], []).append(name)

    def priority(full: str) -> tuple[int, str]:
        for i, prefix in enumerate(PACKAGE_PRIORITY):
            if full.startswith(prefix):
                return (i, full)
        return (len(PACKAGE_PRIORITY), full)

    result: dict[str, str] = {}
    for short, fulls in by_short.items():
        fulls.sort(key=priority)
        result[fulls[0]] = short
        for full in fulls[1:]:
            parts = full.split(".")
            qualifier = "".join(p[:1].upper() + p[1:] for p in parts[-3:-1] if p.isidentifier())
            result[full] = qualifier + short
    if len(set(result.values())) != len(result):
        raise ValueError("class name collision could not be resolved")
    return result


def first_sentence(description: str) -> str:
    text = " ".join(description.split())
    match = re.search(r"(?<=\.)\s", text)
    sentence = text[: match.start()] if match else text
    return sentence.replace("\\", "\\\\").replace('"""', '\\"\\"\\"').strip()


class Generator:
    def __init__(self, schemas: dict[str, dict], roots: Iterable[str]) -> None:
        self.schemas = schemas
        self.names = reachable(schemas, roots)
        self.classes = class_names(n for n in self.names if is_struct(schemas[n]))

    def type_of(self, prop: dict, where: str) -> str:
        """Python type expression for a property schema."""
        if "$ref" in prop:
            return self.type_of_ref(prop["$ref"].removeprefix(_REF_PREFIX), where)
        if "allOf" in prop:
            if len(prop["allOf"]) != 1:
                raise ValueError(f"{where}: allOf with {len(prop['allOf'])} members")
            return self.type_of(prop["allOf"][0], where)
        kind = prop.get("type")
        if kind == "string":
            return "str"
        if kind == "integer":
            return "int"
        if kind == "number":
            return "float"
        if kind == "boolean":
            return "bool"
        if kind == "array":
            return f"list[{self.type_of(prop['items'], where + '[]')}]"
        if kind == "object":
            extra = prop.get("additionalProperties")
            if isinstance(extra, dict):
                return f"dict[str, {self.type_of(extra, where + '{}')}]"
            return "dict[str, Any]"
        if kind is None and not prop.get("properties"):
            return "Any"
        raise ValueError(f"{where}: unsupported schema {prop!r}")

    def type_of_ref(self, name: str, where: str) -> str:
        if name in SCALAR_ALIASES:
            return SCALAR_ALIASES[name]
        if name in self.classes:
            return self.classes[name]
        # An object without properties (FieldsV1, RawExtension) or a named scalar.
        return self.type_of(self.schemas[name], where)

    def emit_class(self, name: str) -> list[str]:
        schema = self.schemas[name]
        cls = self.classes[name]
        required = set(schema.get("required", ()))
        lines = [f"class {cls}(_Struct):"]
        doc = first_sentence(schema.get("description", "")) or cls
        lines.append(f'    """{doc}"""')
        lines.append("")
        props = schema["properties"]
        attrs: set[str] = set()
        # msgspec (kw_only) allows required fields after optional ones, but
        # listing required fields first reads better.
        order = sorted(props, key=lambda p: (p not in required, p))
        for json_name in order:
            attr = snake_case(json_name)
            if attr in attrs:
                raise ValueError(f"{name}: attribute {attr} is not unique")
            attrs.add(attr)
            typ = self.type_of(props[json_name], f"{name}.{json_name}")
            rename = f'name="{json_name}"' if attr != json_name else ""
            if json_name in required:
                value = f" = msgspec.field({rename})" if rename else ""
                lines.append(f"    {attr}: {typ}{value}")
            else:
                if typ != "Any" and not typ.endswith("| None"):
                    typ += " | None"
                args = ", ".join(a for a in ("default=None", rename) if a)
                value = f"msgspec.field({args})" if rename else "None"
                lines.append(f"    {attr}: {typ} = {value}")
        return lines

    def render(self) -> str:
        out = [
            "# GENERATED FILE - DO NOT EDIT.",
            "# Generated by tools/gen_k8s_types.py from the Kubernetes OpenAPI v3 documents in",
            "# /work/shared/specs/kubernetes (core/v1 and coordination.k8s.io/v1).",
            "# Regenerate with: python tools/gen_k8s_types.py",
            '"""Kubernetes API types (core/v1 Pod, PodList, Node; coordination/v1 Lease) as msgspec Structs."""',
            "",
            "from __future__ import annotations",
            "",
            "from typing import Any",
            "",
            "import msgspec",
            "",
            "",
            "class _Struct(msgspec.Struct, kw_only=True, omit_defaults=True, repr_omit_defaults=True):",
            '    """Base of all generated types: keyword-only, unknown fields ignored, defaults omitted."""',
            "",
        ]
        for name in sorted(self.classes, key=lambda n: self.classes[n]):
            out.append("")
            out.extend(self.emit_class(name))
            out.append("")
        all_names = sorted(self.classes.values())
        out.append("")
        out.append("__all__ = [")
        out.extend(f'    "{n}",' for n in all_names)
        out.append("]")
        return "\n".join(out) + "\n"


def generate(core: Path, coordination: Path) -> str:
    """Return the source text of edgelet/api/types.py."""
    return Generator(load_schemas([core, coordination]), ROOTS).render()


def main(argv: list[str]) -> int:
    core = Path(argv[1]) if len(argv) > 1 else DEFAULT_CORE
    coordination = Path(argv[2]) if len(argv) > 2 else DEFAULT_COORD
    output = Path(argv[3]) if len(argv) > 3 else DEFAULT_OUTPUT
    output.write_text(generate(core, coordination), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
