"""A KG as tables: parsing and stable ids of ingested dumps, refresh diffs, popularity statistics (paper
001 Sec. 3.3) and the generated Wikidata5m-shaped KG."""
