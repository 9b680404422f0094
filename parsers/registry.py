"""The service's extractors: plain text and Markdown in process; PDF, HTML and Word documents in the
parser pool's children (`default_registry`)."""

from __future__ import annotations

from knowledge.parsers.base import ExtractorRegistry
from knowledge.parsers.markup import docx_extractor, html_extractor
from knowledge.parsers.pdf import PdfExtractor
from knowledge.parsers.text import MarkdownExtractor, PlainTextExtractor
from knowledge.supervisors.parser_pool import ParserPool


def default_registry(pool: ParserPool) -> ExtractorRegistry:
    """Every extractor the service has, the pooled ones parsing in ``pool``'s children."""
    return ExtractorRegistry([PlainTextExtractor(), MarkdownExtractor(), PdfExtractor(pool), html_extractor(pool),
                              docx_extractor(pool)])
