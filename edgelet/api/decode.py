"""Decoding manifest bytes (JSON or YAML, one or many documents, Pod/PodList/List) into v1 Pods, and the v1
ConfigMaps and Secrets beside them."""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Iterator
from typing import Any

import msgspec
import yaml

from edgelet.api.configobjects import KINDS as _OBJECT_KINDS
from edgelet.api.configobjects import ConfigObject, ConfigObjectError, decode_config_object
from edgelet.api.errors import ManifestDecodeError
from edgelet.api.types import Pod, PodList
from edgelet.api.unknown import find_unknown_fields, unknown_field_warning

__all__ = ["parse_documents", "parse_manifests", "parse_manifests_with_warnings"]

_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_VALUE_TAG = "tag:yaml.org,2002:value"
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# A pod has hundreds of nodes; the cap stops alias bombs (`&a [*b, *b, ...]`),
# which PyYAML builds as shared references that would expand exponentially.
_MAX_NODES = 100_000
# Deeper than any manifest needs (a Pod is about 12 levels deep). PyYAML's composer recurses in C once per
# level: 30,000 nested `[` overflow the stack and kill the process (a segfault, not an exception), so the
# depth is checked on the parser's event stream, which needs no recursion, before any node is composed.
MAX_DEPTH = 100
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MSGSPEC_ERROR = re.compile(r"^(?P<msg>.*?)(?: - at (?:`(?P<key>key)` in )?`(?P<path>\$[^`]*)`)?$", re.S)
_LIST_KINDS = ("PodList", "List")
_GO_FLOATS = {"inf": "+Inf", "-inf": "-Inf", "nan": "NaN"}


class _Loader(yaml.CSafeLoader):
    """CSafeLoader that keeps timestamps as strings, as Kubernetes' YAML decoder does."""


# Class-level copies, so yaml.CSafeLoader itself is left untouched.
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_TIMESTAMP_TAG, _VALUE_TAG)]
    for first, resolvers in yaml.CSafeLoader.yaml_implicit_resolvers.items()
}
# The stub ties the constructor's type to the loader class; SafeConstructor's method fits every safe loader.
_Loader.add_constructor(_TIMESTAMP_TAG, yaml.constructor.SafeConstructor.construct_yaml_str)  # type: ignore[type-var]


def parse_manifests(data: bytes, origin: str) -> list[Pod]:
    """Decode every v1 Pod in `data` (a file's or URL's content); raise ManifestDecodeError.

    Accepts JSON or YAML, YAML streams of several documents, and Pod, PodList
    and v1 List documents. Empty documents are skipped. The whole input is
    rejected on the first problem, so a half-valid file never half-applies.
    """
    return parse_manifests_with_warnings(data, origin)[0]


def parse_manifests_with_warnings(data: bytes, origin: str) -> tuple[list[Pod], list[str]]:
    """parse_manifests, plus one warning per unknown field, as kubectl's `--validate=warn` prints them.

    Unknown fields are accepted and dropped, as with the API server's
    `fieldValidation=Warn`: `unknown field "spec.containers[0].imagePullPolcy"`,
    prefixed with `document N: ` in a stream of several documents.
    ConfigMaps and Secrets beside the pods are validated and left out (see parse_documents).
    """
    pods, _, warnings = parse_documents(data, origin)
    return pods, warnings


def parse_documents(data: bytes, origin: str) -> tuple[list[Pod], list[ConfigObject], list[str]]:
    """Every v1 Pod, ConfigMap and Secret in `data`, and the unknown-field warnings; raise ManifestDecodeError.

    One bad document, pod or object, refuses the whole input, as for pods alone.
    """
    documents = _load_documents(data, origin)
    multi = len(documents) > 1
    pods: list[Pod] = []
    objects: list[ConfigObject] = []
    warnings: list[str] = []
    for index, line, obj in documents:
        if obj is None:
            continue
        where = _Where(origin, index if multi else None, line if multi else None)
        prefix = f"document {index}: " if multi else ""
        for item in _pods_from_document(obj, where):
            if isinstance(item, tuple):
                objects.append(item[0])
                warnings.extend(prefix + w for w in item[1])
            else:
                pods.append(item)
        # _pods_from_document accepted it, so obj is an object with a string kind.
        if obj["kind"] in _OBJECT_KINDS:
            continue
        root = Pod if obj["kind"] == "Pod" else PodList
        if root is PodList and isinstance(obj.get("items"), list):
            # A List's ConfigMaps and Secrets reported their own fields; its pods keep their indexes.
            items = [{} if isinstance(i, dict) and i.get("kind") in _OBJECT_KINDS else i for i in obj["items"]]
            obj = {**obj, "items": items}
        warnings.extend(prefix + unknown_field_warning(path) for path in find_unknown_fields(obj, root))
    return pods, objects, warnings


class _Where:
    """Where a document came from, to build errors naming the document and field."""

    def __init__(self, origin: str, document: int | None, line: int | None) -> None:
        self.origin = origin
        self.document = document
        self.line = line

    def error(self, path: str, message: str) -> ManifestDecodeError:
        prefix = f"document {self.document}: " if self.document is not None else ""
        return ManifestDecodeError(
            f"{prefix}{path}: {message}",
            origin=self.origin,
            document=self.document,
            path=path,
            line=self.line,
        )


def _load_documents(data: bytes, origin: str) -> list[tuple[int, int | None, Any]]:
    """(index, first line, plain object) of each document; JSON is one document."""
    stripped = data.lstrip(b"\xef\xbb\xbf \t\r\n")
    if stripped[:1] in (b"{", b"["):
        try:
            return [(0, 1, msgspec.json.decode(stripped))]
        except RecursionError as exc:
            raise ManifestDecodeError("$: nested too deeply", origin=origin, path="$") from exc
        except msgspec.MsgspecError:
            pass  # YAML flow style also starts with `{`: let the YAML parser decide and report.
    return list(_load_yaml(data, origin))


def _prescan(data: bytes, origin: str) -> None:
    """Refuse, from the event stream alone, documents too deep to compose or too large once aliases expand.

    Every alias counts as the size of what it names, so billion-laughs
    aliases and `<<:` merge-key chains (whose merges copy, not share) are
    refused after reading the bytes once, before any of it is built.
    """
    sizes: dict[str, int] = {}  # anchor -> values it stands for, expanded
    stack: list[tuple[str | None, int]] = []  # open collections: (anchor, running count at their start)
    index = -1
    running = 0
    for event in yaml.parse(data, Loader=_Loader):
        if isinstance(event, yaml.DocumentStartEvent):
            index, running = index + 1, 0
            continue
        if isinstance(event, yaml.CollectionStartEvent):
            if len(stack) >= MAX_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark else None
                raise ManifestDecodeError(
                    f"document {index}: nested more than {MAX_DEPTH} levels deep",
                    origin=origin,
                    document=index,
                    line=line,
                )
            stack.append((event.anchor, running))
            running += 1
        elif isinstance(event, yaml.CollectionEndEvent):
            anchor, start = stack.pop()
            if anchor:
                sizes[anchor] = running - start
        elif isinstance(event, yaml.ScalarEvent):
            running += 1
            if event.anchor:
                sizes[event.anchor] = 1
        elif isinstance(event, yaml.AliasEvent):
            running += sizes.get(event.anchor or "", 1)
        else:
            continue
        if running > _MAX_NODES:
            raise ManifestDecodeError(
                f"document {index}: more than {_MAX_NODES} values (aliases and merge keys expanded)",
                origin=origin,
                document=index,
            )


def _load_yaml(data: bytes, origin: str) -> Iterator[tuple[int, int | None, Any]]:
    try:
        _prescan(data, origin)
    except yaml.MarkedYAMLError as exc:
        raise _yaml_error(exc, data, origin, 0) from exc
    except yaml.YAMLError as exc:
        raise ManifestDecodeError(f"invalid YAML: {exc}", origin=origin) from exc
    loader = _Loader(data)
    index = 0
    try:
        while loader.check_node():
            node = loader.get_node()
            line = node.start_mark.line + 1 if node is not None else None
            yield index, line, loader.construct_document(node) if node is not None else None
            index += 1
    except yaml.MarkedYAMLError as exc:
        raise _yaml_error(exc, data, origin, index) from exc
    except yaml.YAMLError as exc:  # ReaderError: not UTF-8/UTF-16, or control characters
        raise ManifestDecodeError(f"invalid YAML: {exc}", origin=origin) from exc
    except RecursionError as exc:
        raise ManifestDecodeError(f"document {index}: nested too deeply", origin=origin, document=index) from exc
    finally:
        loader.dispose()


def _yaml_error(exc: yaml.MarkedYAMLError, data: bytes, origin: str, index: int) -> ManifestDecodeError:
    mark = exc.problem_mark or exc.context_mark
    problem = exc.problem or "invalid YAML"
    if exc.context:
        problem += f" ({exc.context})"
    if mark is not None and _has_tab(data, mark.line):
        problem += " (YAML does not allow tabs for indentation; use spaces)"
    if mark is None:
        return ManifestDecodeError(f"document {index}: {problem}", origin=origin, document=index)
    line, column = mark.line + 1, mark.column + 1
    return ManifestDecodeError(
        f"line {line}, column {column}: {problem}",
        origin=origin,
        document=index,
        line=line,
        column=column,
    )


def _has_tab(data: bytes, line: int) -> bool:
    lines = data.splitlines()
    return 0 <= line < len(lines) and b"\t" in lines[line]


_Item = Pod | tuple[ConfigObject, list[str]]


def _pods_from_document(obj: Any, where: _Where) -> list[_Item]:
    try:
        _check_plain(obj, "$", [0])
    except _Problem as exc:
        raise where.error(exc.path, exc.message) from None
    except RecursionError as exc:
        raise where.error("$", "nested too deeply") from exc
    if not isinstance(obj, dict):
        raise where.error("$", f"expected object, got {_type_name(obj)}")
    kind = _require_str(obj, "kind", "$", where)
    api_version = _require_str(obj, "apiVersion", "$", where)
    if kind == "Pod":
        _expect_v1(api_version, kind, "$", where)
        return [_convert(obj, "$", where)]
    if kind in _OBJECT_KINDS:
        _expect_v1(api_version, kind, "$", where)
        return [_config_object(obj, "$", where)]
    if kind in _LIST_KINDS:
        _expect_v1(api_version, kind, "$", where)
        items = obj.get("items")
        if items is None:
            return []
        if not isinstance(items, list):
            raise where.error("$.items", f"expected array, got {_type_name(items)}")
        return [_list_item(item, kind, f"$.items[{i}]", where) for i, item in enumerate(items)]
    raise where.error("$.kind", f"unsupported kind {kind} (expected Pod, ConfigMap, Secret, PodList or List)")


def _list_item(item: Any, list_kind: str, path: str, where: _Where) -> _Item:
    if not isinstance(item, dict):
        raise where.error(path, f"expected object, got {_type_name(item)}")
    # API servers leave kind/apiVersion out of PodList items; a v1 List holds
    # arbitrary objects, so there they are required.
    if list_kind == "List" or "kind" in item:
        kind = _require_str(item, "kind", path, where)
        if list_kind == "List" and kind in _OBJECT_KINDS:
            _expect_v1(_require_str(item, "apiVersion", path, where), kind, path, where)
            return _config_object(item, path, where)
        if kind != "Pod":
            raise where.error(f"{path}.kind", f"expected Pod, got {kind}")
    if list_kind == "List" or "apiVersion" in item:
        _expect_v1(_require_str(item, "apiVersion", path, where), "Pod", path, where)
    return _convert(item, path, where)


def _config_object(obj: dict[str, Any], path: str, where: _Where) -> tuple[ConfigObject, list[str]]:
    try:
        return decode_config_object(obj, path)
    except ConfigObjectError as exc:
        first, *rest = exc.errors
        message = "; ".join([first.message, *(str(e) for e in rest)])
        raise where.error(first.path, message) from None


def _require_str(obj: dict[str, Any], key: str, path: str, where: _Where) -> str:
    value = obj.get(key)
    if value is None:
        raise where.error(path, f"missing required field {key}")
    if not isinstance(value, str):
        raise where.error(f"{path}.{key}", f"expected str, got {_type_name(value)}")
    return value


def _expect_v1(api_version: str, kind: str, path: str, where: _Where) -> None:
    if api_version != "v1":
        raise where.error(f"{path}.apiVersion", f"expected v1 for kind {kind}, got {api_version}")


# msgspec (0.22) builds a type's decoding info on its first use without a lock: two threads decoding their
# first Pods at once (the node's and the card's manifest directories, or a file and the URL source, scanned
# in worker threads) crash the interpreter with SIGSEGV. Building it here, once, under the import lock,
# leaves nothing to race over (copy_pod's json decode shares the info); the lock covers a decode that
# imports this module from a thread while another thread decodes already (tests/unit/test_decode_threads.py).
msgspec.json.Decoder(Pod)
_CONVERT_LOCK = threading.Lock()


def _convert(obj: dict[str, Any], path: str, where: _Where) -> Pod:
    try:
        with _CONVERT_LOCK:
            return msgspec.convert(obj, Pod)
    except msgspec.ValidationError as exc:
        field_path, message = _translate(str(exc))
        raise where.error(path + field_path[1:], message) from exc
    except RecursionError as exc:
        raise where.error(path, "nested too deeply") from exc


def _translate(msgspec_message: str) -> tuple[str, str]:
    """msgspec's "Expected `int`, got `str` - at `$.a.b`" -> ("$.a.b", "expected int, got str")."""
    match = _MSGSPEC_ERROR.match(msgspec_message)
    assert match is not None  # the pattern matches any string
    message = match["msg"].replace("`", "")
    message = message.replace("Object missing required field", "missing required field")
    message = message[:1].lower() + message[1:]
    if match["key"]:
        message = f"key: {message}"
    return match["path"] or "$", message


class _Problem(Exception):
    """A problem found by _check_plain, before the document context is known."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def _check_plain(obj: Any, path: str, count: list[int]) -> None:
    """Reject what msgspec would accept or report badly: non-string keys, huge ints, alias bombs."""
    count[0] += 1
    if count[0] > _MAX_NODES:
        raise _Problem(path, f"document has more than {_MAX_NODES} values")
    if isinstance(obj, dict):
        for key, value in obj.items():
            if not isinstance(key, str):
                raise _Problem(path, f"keys must be strings, got {_type_name(key)} {key!r}")
            _check_plain(value, _child(path, key), count)
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            _check_plain(value, f"{path}[{i}]", count)
    elif isinstance(obj, int) and not isinstance(obj, bool) and not _INT64_MIN <= obj <= _INT64_MAX:
        raise _Problem(path, f"integer {obj} out of range")
    elif isinstance(obj, float) and not math.isfinite(obj):
        # YAML's .inf/.nan have no JSON form; Kubernetes' YAML-to-JSON step rejects them the same way.
        raise _Problem(path, f"unsupported value: {_GO_FLOATS[repr(obj)]}")


def _child(path: str, key: str) -> str:
    if _PLAIN_KEY.match(key):
        return f"{path}.{key}"
    return f"{path}[{msgspec.json.encode(key).decode()}]"


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return type(value).__name__
