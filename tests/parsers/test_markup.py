"""The host's side of the HTML and Word extractors (`knowledge.parsers.markup`)."""

from __future__ import annotations


def test_the_hosts_extractor_versions_name_the_childs_rules() -> None:
    # The host names the rules without importing the parsing libraries (knowledge.parsers.markup);
    # the child runs the modules' own: a change of rules must move both, or chunk sets would be
    # labelled with rules that did not make them.
    from knowledge.parsers import docx_extract, html_extract, markup

    assert markup.HTML_TEXT_RULES == html_extract.HTML_TEXT_RULES
    assert markup.DOCX_TEXT_RULES == docx_extract.DOCX_TEXT_RULES
    assert markup.HTML_TEXT_VERSION.startswith(f"{html_extract.HTML_TEXT_RULES}-trafilatura")
    assert markup.DOCX_TEXT_VERSION.startswith(f"{docx_extract.DOCX_TEXT_RULES}-python-docx")
