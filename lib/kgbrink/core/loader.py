"""Settings read from a file, the environment and ``--set`` overrides, into the typed :class:`Settings`.

``conf/<env>.yaml`` holds only what an environment changes; ``--set key=value`` overrides a setting on the
command line. Every value is checked against its declared type (``--set mining.splits=train`` and
``--set 'mining.splits=[train]'`` both give ``["train"]``); an unknown key names the closest valid one;
each section then checks its values (its ``__post_init__``). Relative local paths become absolute at load
time; URIs (``s3a://...``) stay as they are.
"""

from __future__ import annotations

import os
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from kgbrink.core.locations import install_root, resolve_location
from kgbrink.core.settings import PATH_TOP_LEVEL, SECTIONS, TOP_LEVEL, Settings, closest, key_parts
from kgbrink.core.typed import ConfigError, coerce


def overridden(settings: Settings, assignments: list[str]) -> Settings:
    """A copy of ``settings`` with ``key=value`` assignments applied, each parsed by the setting's type."""
    values = settings.as_dict()
    for item in assignments:
        _assign(values, item)
    return _build(values, settings.source, [*settings.overrides, *assignments], merge_spark_conf=False)


def _declared(key: str) -> tuple[Any, bool]:
    """The declared type of a dotted key and whether it is a path setting."""
    parts = key.split(".")
    if len(parts) == 1 and parts[0] in TOP_LEVEL:
        return TOP_LEVEL[parts[0]][0], parts[0] in PATH_TOP_LEVEL
    if len(parts) == 2 and parts[0] in SECTIONS:
        hints = typing.get_type_hints(SECTIONS[parts[0]])
        for f in fields(SECTIONS[parts[0]]):
            if f.name == parts[1]:
                return hints[f.name], f.metadata.get("path", False)
    raise ConfigError(f"unknown setting '{key}'{closest(key)}")


def _assign(values: dict[str, Any], item: str) -> None:
    """Apply one ``key=value`` override; the value is read as YAML, then coerced to the declared type."""
    if "=" not in item:
        raise ConfigError(f"override '{item}' is not of the form key=value")
    key, raw = item.split("=", 1)
    parts = key_parts(key)
    try:
        parsed = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        parsed = raw
    if parts[:2] == ["spark", "conf"] and len(parts) == 3:
        values["spark"]["conf"][parts[2]] = parsed
        return
    kind, _ = _declared(".".join(parts))
    if kind is str or (typing.get_origin(kind) in (types.UnionType, typing.Union) and str in typing.get_args(kind)):
        parsed = None if parsed is None else raw  # a name stays as written ('007' is not 7)
    elif _is_list(kind) and isinstance(parsed, str) and "," in parsed:
        parsed = [yaml.safe_load(item) if item.strip() else "" for item in parsed.split(",")]  # a,b is [a, b]
    if len(parts) == 1:
        values[parts[0]] = parsed
    else:
        values[parts[0]][parts[1]] = parsed


def _is_list(kind: Any) -> bool:
    if typing.get_origin(kind) in (types.UnionType, typing.Union):
        return any(typing.get_origin(a) is list for a in typing.get_args(kind))
    return typing.get_origin(kind) is list


def _build(values: Mapping[str, Any], source: str, overrides: list[str], merge_spark_conf: bool = True) -> Settings:
    """Typed settings from a mapping of the file's values over the defaults; unknown keys are errors.
    ``merge_spark_conf``: ``spark.conf`` is a file's, merged over the defaults (not yet-merged settings)."""
    kwargs: dict[str, Any] = {}
    for key in values:
        if key not in TOP_LEVEL and key not in SECTIONS:
            raise ConfigError(f"{source}: unknown setting '{key}'{closest(key)}")
    for key, (kind, default, _doc) in TOP_LEVEL.items():
        value = coerce(key, values.get(key, default), kind)
        if key in PATH_TOP_LEVEL and value is not None and not str(value).strip():
            raise ConfigError(f"{source}: setting '{key}' is an empty path")
        kwargs[key] = resolve_location(value) if key in PATH_TOP_LEVEL else value
    for name, cls in SECTIONS.items():
        given = values.get(name) or {}
        if not isinstance(given, Mapping):
            raise ConfigError(f"{source}: '{name}' must be a mapping of settings")
        values_of = {f.name: getattr(cls(), f.name) for f in fields(cls)}  # the defaults
        hints = typing.get_type_hints(cls)
        for key, value in given.items():
            if key not in values_of:
                raise ConfigError(f"{source}: unknown setting '{name}.{key}'{closest(f'{name}.{key}')}")
            if name == "spark" and key == "conf":
                if not isinstance(value, Mapping):
                    raise ConfigError(f"{source}: spark.conf must be a mapping of Spark settings")
                merged = {**(values_of["conf"] if merge_spark_conf else {}), **{str(k): v for k, v in value.items()}}
                value = {k: v for k, v in merged.items() if v is not None}
            values_of[key] = coerce(f"{name}.{key}", value, hints[key])
        for f in fields(cls):
            if f.metadata.get("path"):
                current = values_of[f.name]
                if any(
                    c is not None and not str(c).strip() for c in (current if isinstance(current, list) else [current])
                ):
                    raise ConfigError(f"{source}: setting '{name}.{f.name}' is an empty path")
                base = install_root() if f.metadata["path"] == "install" else None
                values_of[f.name] = (
                    [resolve_location(p, base) for p in current]
                    if isinstance(current, list)
                    else resolve_location(current, base)
                )
        try:
            kwargs[name] = cls(**values_of)  # the section checks its values
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None
    return Settings(**kwargs, source=source, overrides=list(overrides))


def default_config_path() -> Path:
    """``$KGBRINK_CONF`` if set, else ``conf/local.yaml`` of the working directory, else the installation's."""
    if "KGBRINK_CONF" in os.environ:
        return Path(os.environ["KGBRINK_CONF"])
    here = Path("conf/local.yaml")
    return here if here.is_file() else install_root() / "conf" / "local.yaml"


DRIVER_MEMORY_ENV = "KGBRINK_DRIVER_MEMORY"
_JVM_SIZE = re.compile(r"[1-9][0-9]*[kmgt]?b?", re.IGNORECASE)


def environment_overrides() -> list[str]:
    """``key=value`` overrides from the environment: ``$KGBRINK_DRIVER_MEMORY`` (e.g. ``6g``) sets
    ``spark.conf.spark.driver.memory`` over every settings file; ``--set`` still wins."""
    memory = os.environ.get(DRIVER_MEMORY_ENV)
    if memory is None:
        return []
    if not _JVM_SIZE.fullmatch(memory.strip()):
        raise ConfigError(f"${DRIVER_MEMORY_ENV}={memory!r} is not a JVM memory size such as 4g or 6144m")
    return [f"spark.conf.spark.driver.memory={memory.strip()}"]


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Settings:
    """Settings of an environment file over the defaults, then :func:`environment_overrides`, then the
    ``key=value`` ``overrides``."""
    path = Path(path) if path else default_config_path()
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        values = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    base = _build(values, str(path), [])
    overrides = [*environment_overrides(), *(overrides or [])]
    return base.with_overrides(overrides) if overrides else base
