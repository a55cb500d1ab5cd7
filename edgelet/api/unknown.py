"""Finding the fields of a decoded manifest that the Kubernetes types do not know (kubectl's field validation Warn).

msgspec ignores unknown fields when it converts, as the API server does with
`fieldValidation=Ignore`; this walks the plain decoded object beside the
Struct types and names every key that was dropped, so a typo such as
`imagePullPolcy` is reported instead of silently doing nothing.
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Any, Union

import msgspec

from edgelet.api.types import Pod

__all__ = ["find_unknown_fields", "unknown_field_warning"]


class _List:
    """Shape of a JSON array whose items have shape `item`."""

    __slots__ = ("item",)

    def __init__(self, item: _Shape) -> None:
        self.item = item


class _Map:
    """Shape of a JSON object with free keys whose values have shape `value`."""

    __slots__ = ("value",)

    def __init__(self, value: _Shape) -> None:
        self.value = value


# A Struct class, a list or map of shapes, or None for anything not walked (scalars, Any).
_Shape = Union[type[msgspec.Struct], _List, _Map, None]


def find_unknown_fields(raw: Any, root_type: type[msgspec.Struct] = Pod) -> list[str]:
    """Paths (`spec.containers[0].imagePullPolcy`) of the keys in `raw` that `root_type` does not define.

    `raw` is what a JSON/YAML decoder produced. Values of the wrong type are
    skipped: converting reports those. Never raises on odd input.
    """
    found: list[str] = []
    _walk(raw, root_type, "", found)
    return found


def unknown_field_warning(path: str) -> str:
    """The warning kubectl prints for an unknown field."""
    return f"unknown field {msgspec.json.encode(path).decode()}"


def _walk(raw: Any, shape: _Shape, path: str, found: list[str]) -> None:
    if shape is None:
        return
    if isinstance(shape, _List):
        if isinstance(raw, list):
            for i, item in enumerate(raw):
                _walk(item, shape.item, f"{path}[{i}]", found)
        return
    if not isinstance(raw, dict):
        return
    if isinstance(shape, _Map):
        for key, value in raw.items():
            _walk(value, shape.value, f"{path}[{key}]", found)
        return
    fields = _fields(shape)
    for key, value in raw.items():
        child = f"{path}.{key}" if path else str(key)
        if key in fields:
            _walk(value, fields[key], child, found)
        else:
            found.append(child)


@functools.cache
def _fields(cls: type[msgspec.Struct]) -> dict[str, _Shape]:
    """JSON name -> shape of each field of a Struct; computed once per class, on first use."""
    hints = typing.get_type_hints(cls)
    return {
        json_name: _shape_of(hints[attr])
        for attr, json_name in zip(cls.__struct_fields__, cls.__struct_encode_fields__)
    }


def _shape_of(annotation: Any) -> _Shape:
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        shapes = [_shape_of(arg) for arg in typing.get_args(annotation) if arg is not type(None)]
        walked = [s for s in shapes if s is not None]
        # `str | int | float` and the like are scalars; a lone container type is walked.
        return walked[0] if len(walked) == 1 else None
    if origin is list:
        (item,) = typing.get_args(annotation)
        item_shape = _shape_of(item)
        return _List(item_shape) if item_shape is not None else None
    if origin is dict:
        _, value = typing.get_args(annotation)
        value_shape = _shape_of(value)
        return _Map(value_shape) if value_shape is not None else None
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        return annotation
    return None
