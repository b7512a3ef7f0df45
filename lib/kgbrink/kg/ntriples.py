"""Wikidata truthy N-Triples: the entity-to-entity edges and English labels of a dump, line by line."""

from __future__ import annotations

import re

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.core.quarantine import OK, QUARANTINED, SKIPPED
from kgbrink.kg.ingest import (
    INVALID_UTF8,
    MALFORMED_NTRIPLE,
    WIKIDATA_ENTITY_KEY,
    WIKIDATA_RELATION_KEY,
    strip_cr,
    utf8_check,
)

WIKIDATA_ENTITY_IRI = "http://www.wikidata.org/entity/"
WIKIDATA_DIRECT_PROPERTY_IRI = "http://www.wikidata.org/prop/direct/"
LABEL_PREDICATES = ("http://www.w3.org/2000/01/rdf-schema#label", "http://schema.org/name")
_NT_LINE = r"^\s*(<[^>]*>|_:\S+)\s+<([^>]*)>\s+(<[^>]*>|_:\S+|\"(?:[^\"\\]|\\.)*\"(?:@[A-Za-z][A-Za-z0-9-]*|\^\^<[^>]*>)?)\s*\.\s*$"


def parse_ntriples(lines: DataFrame, label_language: str = "en") -> DataFrame:
    """Wikidata truthy N-Triples: keep ``<entity/Q..> <prop/direct/P..> <entity/Q..>`` edges.

    Adds ``h_key, r_key, t_key, status, reason, detail`` and ``label_key, label`` (English ``rdfs:label``
    / ``schema:name`` literals, unescaped for ``\\"`` and ``\\\\``). Lines that are well-formed but not
    entity-to-entity edges get status ``skipped`` with the kind in ``reason``: ``blank_or_comment``,
    ``non_entity_subject``, ``label``, ``other_predicate``, ``literal_object``, ``non_entity_object``.
    Lines that are not N-Triples at all are quarantined as ``malformed_ntriple``.
    """
    line = strip_cr(F.col("line"))
    subject = F.regexp_extract(line, _NT_LINE, 1)
    predicate = F.regexp_extract(line, _NT_LINE, 2)
    obj = F.regexp_extract(line, _NT_LINE, 3)
    entity = rf"^<{re.escape(WIKIDATA_ENTITY_IRI)}({WIKIDATA_ENTITY_KEY})>\z"
    prop = rf"^{re.escape(WIKIDATA_DIRECT_PROPERTY_IRI)}({WIKIDATA_RELATION_KEY})\z"
    is_label = predicate.isin(*LABEL_PREDICATES)
    label_literal = rf'^"((?:[^"\\]|\\.)*)"@{re.escape(label_language)}$'
    blank = F.trim(line).rlike("^(#.*)?$")
    skip_rules = [
        (blank, "blank_or_comment"),
        (~line.rlike(_NT_LINE), None),
        (~subject.rlike(entity), "non_entity_subject"),
        (is_label, "label"),
        (~predicate.rlike(prop), "other_predicate"),
        (obj.startswith('"'), "literal_object"),
        (~obj.rlike(entity), "non_entity_object"),
    ]
    skip_rules.insert(0, (utf8_check()[0], INVALID_UTF8))
    status, reason = F.lit(OK), F.lit(None).cast("string")
    for condition, kind in reversed(skip_rules):
        if kind in (None, INVALID_UTF8):
            status = F.when(condition, F.lit(QUARANTINED)).otherwise(status)
            reason = F.when(condition, F.lit(kind or MALFORMED_NTRIPLE)).otherwise(reason)
        else:
            status = F.when(condition, F.lit(SKIPPED)).otherwise(status)
            reason = F.when(condition, F.lit(kind)).otherwise(reason)
    ok = status == OK
    label_text = F.regexp_extract(obj, label_literal, 1)
    has_label = (reason == "label") & obj.rlike(label_literal) & (label_text != "")
    unescaped = F.regexp_replace(F.regexp_replace(label_text, r'\\"', '"'), r"\\\\", r"\\")
    return lines.withColumns(
        {
            "status": status,
            "reason": reason,
            "detail": F.when(reason == INVALID_UTF8, utf8_check()[2]).when(
                status == QUARANTINED, F.lit("not an N-Triples statement '<s> <p> <o> .'")
            ),
            "h_key": F.when(ok, F.regexp_extract(subject, entity, 1)),
            "r_key": F.when(ok, F.regexp_extract(predicate, prop, 1)),
            "t_key": F.when(ok, F.regexp_extract(obj, entity, 1)),
            "label_key": F.when(has_label, F.regexp_extract(subject, entity, 1)),
            "label": F.when(has_label, unescaped),
        }
    )
