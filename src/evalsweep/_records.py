"""One codec for evalsweep's records: a frozen dataclass is declared once, and its JSON
form, its strict reader and its JSON Schema all come from that declaration.

A record is a dataclass whose field types are ``str``, ``int``, ``float``, ``bool``,
an ``Enum`` of strings, another record, ``list[T]``, ``tuple[T, ...]``, ``dict[str, T]``,
``dict[str, Any]`` (an open JSON object, kept as given) or ``T | None``. A record may also
name read-only properties in ``JSON_PROPERTIES``: written after its fields for readers,
never read back (they follow from the fields). Three field options (``metadata``)
shape the JSON without a second description of the record:

- :func:`section`: an optional part left out of the JSON when it is None;
- ``FLATTEN``: a record field whose fields sit in the enclosing object;
- ``LEADING``: written before the other fields (a version number).

Reading (:func:`decode`) checks every value against its field's type and names the
field in any error (``results[3].value: expected a number, found a string``); a field
of type ``T | None`` may be absent. :func:`json_schema` writes the same rules as a
JSON Schema (draft 2020-12).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import types
import typing
from collections.abc import Callable
from typing import Any, NoReturn

OMIT_NONE = "evalsweep.omit_none"
FLATTEN = "evalsweep.flatten"
LEADING = "evalsweep.leading"
VERSION = "evalsweep.version"  # read by the caller (upgrades), not by decode
_ABSENT = object()


def section(**options: Any) -> Any:
    """A field that is None unless given, and then absent from the JSON."""
    return dataclasses.field(default=None, metadata={OMIT_NONE: True}, **options)


# -- writing --------------------------------------------------------------------------------


def encode(value: Any) -> Any:
    """``value`` as plain JSON values: a record as an object in field order."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        fields = dataclasses.fields(value)
        for item in sorted(fields, key=lambda f: not f.metadata.get(LEADING, False)):
            member = getattr(value, item.name)
            if member is None and item.metadata.get(OMIT_NONE):
                continue
            if item.metadata.get(FLATTEN):
                out.update(encode(member))
            else:
                out[item.name] = encode(member)
        for name in getattr(type(value), "JSON_PROPERTIES", ()):
            out[name] = encode(getattr(value, name))
        return out
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, list | tuple):
        return [encode(item) for item in value]
    if isinstance(value, dict):
        return {key: encode(item) for key, item in value.items()}
    return value


# -- reading --------------------------------------------------------------------------------


class Reader:
    """Reads records from decoded JSON; every error goes through ``fail`` with the field."""

    def __init__(self, fail: Callable[[str, str], NoReturn]) -> None:
        self.fail = fail

    def record(self, cls: type, value: Any, path: str, *, strict: bool = False) -> Any:
        """An instance of the record ``cls`` from the JSON object ``value``."""
        if not isinstance(value, dict):
            self.fail(path, f"expected an object, found {kind_of(value)}")
        if strict:
            names = _json_names(cls)
            extra = sorted(set(value) - names)
            if extra:
                self.fail(_join(path, extra[0]), "not a field of this schema version")
        return self._fields(cls, value, path)

    def _fields(self, cls: type, value: dict[str, Any], path: str) -> Any:
        hints = _hints(cls)
        kwargs: dict[str, Any] = {}
        for item in dataclasses.fields(cls):
            if item.metadata.get(VERSION):
                continue
            hint = hints[item.name]
            if item.metadata.get(FLATTEN):
                kwargs[item.name] = self._fields(hint, value, path)
                continue
            inner, optional = _optional(hint)
            member = value.get(item.name, _ABSENT)
            if optional and (member is _ABSENT or member is None):
                kwargs[item.name] = None  # ``T | None``: absent or null
                continue
            where = _join(path, item.name)
            if member is _ABSENT:
                if item.default is dataclasses.MISSING:
                    self.fail(where, "missing")
                continue  # its default
            kwargs[item.name] = self.value(inner, member, where)
        return cls(**kwargs)

    def value(self, hint: Any, value: Any, path: str) -> Any:
        """``value`` read as the type ``hint``."""
        if hint is Any:
            return value
        if dataclasses.is_dataclass(hint):
            return self.record(typing.cast(type, hint), value, path)
        origin = typing.get_origin(hint)
        if origin is tuple:
            return tuple(self.value(list[_tuple_item(hint)], value, path))  # type: ignore[misc]
        if origin is list:
            (item,) = typing.get_args(hint)
            if item is str:
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    self.fail(path, "expected an array of strings")
                return list(value)
            if not isinstance(value, list):
                self.fail(path, f"expected an array, found {kind_of(value)}")
            return [self.value(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
        if origin is dict:
            _, item = typing.get_args(hint)
            if not isinstance(value, dict):
                self.fail(path, f"expected an object, found {kind_of(value)}")
            if item is Any:
                return value
            return {key: self.value(item, v, _join(path, key)) for key, v in value.items()}
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            if not isinstance(value, str):
                self.fail(path, f"expected a string, found {kind_of(value)}")
            members = {member.value: member for member in hint}
            if value not in members:
                self.fail(path, f"{value[:40]!r} is not a {hint.__name__.lower()}")
            return members[value]
        if hint is str:
            if not isinstance(value, str):
                self.fail(path, f"expected a string, found {kind_of(value)}")
            return value
        if hint is bool:
            if not isinstance(value, bool):
                self.fail(path, f"expected true or false, found {kind_of(value)}")
            return value
        if hint is int:
            if isinstance(value, bool) or not isinstance(value, int):
                self.fail(path, f"expected an integer, found {kind_of(value)}")
            return value
        if hint is float:
            if isinstance(value, bool) or not isinstance(value, int | float):
                self.fail(path, f"expected a number, found {kind_of(value)}")
            return float(value)
        raise TypeError(f"no JSON form for the type {hint!r}")  # a record declared wrongly


def decode(cls: type, value: Any, fail: Callable[[str, str], NoReturn], **options: Any) -> Any:
    """The record ``cls`` read from decoded JSON; ``fail(field, message)`` raises."""
    return Reader(fail).record(cls, value, "", **options)


def kind_of(value: Any) -> str:
    """What a JSON value is, as an error message says it."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    return "a number"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _optional(hint: Any) -> tuple[Any, bool]:
    """(T, True) for ``T | None``, else (hint, False)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(args) == 1 and len(typing.get_args(hint)) == 2:
            return args[0], True
    return hint, False


def _tuple_item(hint: Any) -> Any:
    args = typing.get_args(hint)
    if len(args) != 2 or args[1] is not Ellipsis:
        raise TypeError(f"no JSON form for the type {hint!r} (only tuple[T, ...])")
    return args[0]


def _json_names(cls: type) -> set[str]:
    names: set[str] = set()
    hints = _hints(cls)
    for item in dataclasses.fields(cls):
        if item.metadata.get(FLATTEN):
            names |= _json_names(hints[item.name])
        else:
            names.add(item.name)
    return names | set(getattr(cls, "JSON_PROPERTIES", ()))


# -- JSON Schema ----------------------------------------------------------------------------


def json_schema(cls: type, *, title: str, schema_id: str) -> dict[str, Any]:
    """A JSON Schema (draft 2020-12) of the record ``cls``, from its declaration."""
    definitions: dict[str, Any] = {}
    top = _object_schema(cls, definitions)
    top["additionalProperties"] = False
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": schema_id,
        "title": title,
        **top,
        "$defs": dict(sorted(definitions.items())),
    }


def _object_schema(cls: type, definitions: dict[str, Any]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    hints = _hints(cls)
    for item in dataclasses.fields(cls):
        hint = hints[item.name]
        if item.metadata.get(FLATTEN):
            inner = _object_schema(hint, definitions)
            properties.update(inner["properties"])
            required += inner.get("required", [])
            continue
        inner_hint, optional = _optional(hint)
        schema = _type_schema(inner_hint, definitions)
        if optional:
            schema = {"anyOf": [schema, {"type": "null"}]}
        doc = _field_doc(cls, item.name)
        if doc:
            schema = {"description": doc, **schema}
        properties[item.name] = schema
        if not optional and item.default is dataclasses.MISSING:
            required.append(item.name)
    for name in getattr(cls, "JSON_PROPERTIES", ()):
        returned = typing.get_type_hints(getattr(cls, name).fget).get("return", Any)
        properties[name] = {"readOnly": True, **_type_schema(returned, definitions)}
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    return out


def _type_schema(hint: Any, definitions: dict[str, Any]) -> dict[str, Any]:
    if hint is Any:
        return {}
    if dataclasses.is_dataclass(hint):
        name = typing.cast(type, hint).__name__
        if name not in definitions:
            definitions[name] = {}  # a record that holds itself (a base checkpoint)
            definitions[name] = _object_schema(typing.cast(type, hint), definitions)
        return {"$ref": f"#/$defs/{name}"}
    origin = typing.get_origin(hint)
    if origin is tuple:
        return {"type": "array", "items": _type_schema(_tuple_item(hint), definitions)}
    if origin is list:
        (item,) = typing.get_args(hint)
        return {"type": "array", "items": _type_schema(item, definitions)}
    if origin is dict:
        _, item = typing.get_args(hint)
        if item is Any:
            return {"type": "object"}
        return {"type": "object", "additionalProperties": _type_schema(item, definitions)}
    inner, optional = _optional(hint)
    if optional:
        return {"anyOf": [_type_schema(inner, definitions), {"type": "null"}]}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [member.value for member in hint]}
    simple = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if hint in simple:
        return {"type": simple[hint]}
    raise TypeError(f"no JSON form for the type {hint!r}")


def _field_doc(cls: type, name: str) -> str | None:
    """The docstring written under a field in its class (as Sphinx reads it), if any."""
    import ast
    import inspect
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return None
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    for first, second in zip(body, body[1:], strict=False):
        if (
            isinstance(first, ast.AnnAssign)
            and isinstance(first.target, ast.Name)
            and first.target.id == name
            and isinstance(second, ast.Expr)
            and isinstance(second.value, ast.Constant)
            and isinstance(second.value.value, str)
        ):
            return " ".join(second.value.value.split())
    return None
