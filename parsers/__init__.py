"""``knowledge.parsers`` (this folder, mapped under the package): bytes to text — the Extractor port,
its adapters (text, Markdown, PDF) and the code the PDF parser child runs."""
