"""kgbrink.core.markdown: the one form of the Markdown tables."""

from kgbrink.core import markdown


def test_a_table_has_its_header_separator_and_rows_with_cells_as_text():
    assert markdown.table(["a", "b"], [[1, None], ["x", 2.5]]) == [
        "| a | b |",
        "|---|---|",
        "| 1 | None |",
        "| x | 2.5 |",
    ]
    assert markdown.table(["only"], []) == ["| only |", "|---|"]
