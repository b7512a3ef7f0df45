"""Typed fields of untrusted JSON Lines records: each value's JSON type is checked before it is used.

``from_json`` with a schema reads ``true`` or ``7.0`` into a string column as ``"true"`` and ``"7"``, and a
list as its JSON text, so a wrong type passes as a value. Here a line is parsed once into a VARIANT
(:func:`record`) and each field is read with its JSON kind (:func:`kind`): ``null``, ``string``,
``integer`` (fits 64 bits), ``number``, ``boolean``, ``array`` or ``object``; an absent field has kind
SQL NULL. A line that is not JSON, or an object with a repeated key, parses to NULL.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

KINDS = ("null", "string", "integer", "number", "boolean", "array", "object")


def record(line: Column) -> Column:
    """The line as a VARIANT (NULL: not JSON, or a key repeated in one object)."""
    return F.try_parse_json(line)


def field(value: Column, name: str) -> Column:
    """The VARIANT of ``value``'s key ``name`` (NULL: absent, or ``value`` is not an object)."""
    escaped = name.replace("\\", "\\\\").replace("'", "\\'")
    return F.try_variant_get(value, f"$['{escaped}']", "variant")


def kind(value: Column) -> Column:
    """The JSON kind of a VARIANT (one of :data:`KINDS`; NULL for an absent value)."""
    schema = F.schema_of_variant(value)
    return (
        F.when(value.isNull(), F.lit(None).cast("string"))
        .when(schema == "VOID", "null")
        .when(schema == "STRING", "string")
        .when(schema == "BIGINT", "integer")
        .when(schema == "BOOLEAN", "boolean")
        .when(schema.startswith("ARRAY"), "array")
        .when(schema.startswith("OBJECT"), "object")
        .otherwise("number")
    )


def present(value: Column) -> Column:
    """``value`` is neither absent nor JSON null."""
    return value.isNotNull() & (kind(value) != "null")


def first_field(record: Column, *names: str) -> Column:
    """The first of the fields ``names`` of ``record`` that is present (``qid``, else ``id``)."""
    value = field(record, names[-1])
    for name in reversed(names[:-1]):
        given = field(record, name)
        value = F.when(present(given), given).otherwise(value)
    return value


def elements(value: Column) -> Column:
    """The items of a JSON array as ``array<variant>`` (NULL when ``value`` is not an array)."""
    return F.try_variant_get(value, "$", "array<variant>")


def as_string(value: Column) -> Column:
    """The text of a JSON string or integer (NULL for every other kind)."""
    return F.when(kind(value).isin("string", "integer"), F.try_variant_get(value, "$", "string"))


def first_not(items: Column, kinds: tuple[str, ...]) -> Column:
    """``struct<position, kind>`` of the first item (1-based) whose kind is not in ``kinds`` (NULL: none)."""
    tagged = F.transform(items, lambda item, i: F.struct((i + 1).alias("position"), kind(item).alias("kind")))
    return F.try_element_at(F.filter(tagged, lambda item: ~item["kind"].isin(*kinds)), F.lit(1))
