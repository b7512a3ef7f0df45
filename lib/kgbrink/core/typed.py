"""Values read as their declared types (settings files and ``--set`` overrides): text, integers, numbers,
booleans, lists of them, mappings, each optionally null. A value of the wrong type is an error naming the
setting and the type expected, never a silent conversion ('train' is not the list 't', 'r', ...)."""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from dataclasses import field
from typing import Any


class ConfigError(ValueError):
    """A settings file or override is missing, malformed, unknown or of the wrong type."""


def type_name(kind: Any) -> str:
    args = typing.get_args(kind)
    if typing.get_origin(kind) in (types.UnionType, typing.Union):
        inner = [a for a in args if a is not type(None)]
        return f"{type_name(inner[0])} or null"
    if typing.get_origin(kind) is list:
        return "a list of " + {str: "names", int: "integers", float: "numbers", bool: "booleans"}[args[0]]
    if typing.get_origin(kind) is dict:
        return "a mapping"
    return {str: "text", int: "an integer", float: "a number", bool: "true or false"}.get(kind, str(kind))


def coerce(key: str, value: Any, kind: Any) -> Any:
    """``value`` as the declared ``kind``, or :class:`ConfigError` naming the key and the expected type."""

    def wrong() -> ConfigError:
        return ConfigError(f"setting '{key}' must be {type_name(kind)}, got {value!r}")

    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (types.UnionType, typing.Union):
        if value is None:
            return None
        return coerce(key, value, next(a for a in args if a is not type(None)))
    if origin is list:
        items = value if isinstance(value, list) else [value]
        if value is None or (isinstance(value, str) and not value.strip()):
            raise wrong()
        try:
            return [coerce(key, item, args[0]) for item in items]
        except ConfigError:
            raise wrong() from None
    if origin is dict:
        if not isinstance(value, Mapping):
            raise wrong()
        return dict(value)
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise wrong()
    if kind is int:
        if isinstance(value, bool):
            raise wrong()
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value.strip().replace("_", ""))
            except ValueError:
                try:
                    number = float(value)
                except ValueError:
                    raise wrong() from None
                if number.is_integer():
                    return int(number)
        raise wrong()
    if kind is float:
        if isinstance(value, bool):
            raise wrong()
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise wrong() from None
        raise wrong()
    if kind is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise wrong()
    return value


def setting(default: Any, doc: str, *, path: bool | str = False):
    """A field with its documentation; ``path``: a location resolved against the working directory
    (``"install"``: against kgbrink's installation, :func:`kgbrink.core.locations.install_root`)."""
    meta = {"doc": doc, "path": path}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def require(*checks: tuple[bool, str]) -> None:
    """:class:`ConfigError` with the message of the first check that fails (a section's ``__post_init__``)."""
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)
