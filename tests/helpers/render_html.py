"""A Markdown docs file rendered as a docs site serves it: the page's HTML inside a realistic site layout.

`render_docs_page` renders CommonMark (+ tables) with markdown-it-pyrs, as a static-site generator
would, and wraps it in the chrome every docs site has around the text: a ``<head>`` with styles,
scripts and meta tags, a top header (logo, section links, a search box), a sidebar ``<nav>`` of 20
links, a breadcrumb with an "Edit this page" link (where Sphinx themes place it), previous/next
links, a footer with a copyright line, and a cookie-consent banner. The text sits in ``<main>`` >
``<article>``. The extraction tests (``tests/parsers/test_html_extract.py``) check that the headings
and body words come back and none of the chrome (`CHROME_TEXTS`) does; the retrieval-parity
evaluation reuses it to serve the docs corpora as HTML. Deterministic: the same Markdown and title
give the same bytes.

A YAML front-matter block (Hugo's ``---`` … ``---``) is removed, as the site generator consumes it; a
page whose Markdown has no level-1 heading gets ``<h1>`` + the title first, as Hugo and MkDocs themes
print the page title.
"""

from __future__ import annotations

import html
import re

from markdown_it_pyrs import MarkdownIt

_MD = MarkdownIt("commonmark").enable_many(["table"])
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n.*?\n---[ \t]*(?:\n|\Z)", re.DOTALL)
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_H1 = re.compile(r"^ {0,3}#(?:[ \t]|$)")

#: The sidebar: 20 links, none of whose text is a heading of a corpus page.
SIDEBAR_LINKS = (
    "Overview of the Platform", "Quick Start Tutorial", "Core Concepts Explained", "Installing the CLI",
    "Cluster Administration", "High Availability Setup", "Security Hardening Guide", "Access Control Reference",
    "Monitoring and Metrics", "Backup and Restore Procedures", "Upgrading Between Releases", "Troubleshooting Index",
    "Command Line Reference", "Configuration Reference", "API Reference Docs", "Plugin Development",
    "Release Notes Archive", "Frequently Asked Questions", "Community and Support", "Contributing to the Docs",
)
HEADER_LINKS = ("Docs Home Portal", "Project Blog Posts", "Community Forum Threads", "Source Code on GitHub",
                "Download Latest Releases")
COOKIE_TEXT = ("We use cookies and similar technologies to improve your browsing experience and to analyse "
               "site traffic. By clicking Accept all cookies you consent to our use of cookies.")
COPYRIGHT_TEXT = "Copyright 2024 The Example Project Authors. All rights reserved. Trademark usage policy applies."
FOOTER_LINKS = ("Privacy Policy", "Terms of Service", "Code of Conduct", "Brand Guidelines")
EDIT_URL = "https://github.com/example/project/edit/main/docs/"
#: Every piece of chrome text, for tests that check none of it comes back.
CHROME_TEXTS = (*SIDEBAR_LINKS, *HEADER_LINKS, COOKIE_TEXT, COPYRIGHT_TEXT, *FOOTER_LINKS,
                "Edit this page on GitHub", "Accept all cookies", "Manage cookie preferences",
                "Previous: Release Notes Archive", "Next: Frequently Asked Questions", "Search the documentation")


def strip_front_matter(markdown: str) -> str:
    return _FRONT_MATTER.sub("", markdown, count=1)


def has_h1(markdown: str) -> bool:
    """Whether the Markdown has an ATX level-1 heading outside code fences."""
    fence = ""
    for line in markdown.splitlines():
        if m := _FENCE.match(line):
            if not fence:
                fence = m.group(1)
            elif m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line.strip(" `~"):
                fence = ""
            continue
        if not fence and _H1.match(line):
            return True
    return False


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "page"


def render_docs_page(markdown: str, title: str) -> bytes:
    """The Markdown rendered to HTML inside a docs-site layout (see the module docstring), UTF-8 bytes."""
    markdown = strip_front_matter(markdown)
    body = _MD.render(markdown)
    esc = html.escape(title)
    if not has_h1(markdown):
        body = f"<h1>{esc}</h1>\n{body}"
    sidebar = "\n".join(
        f'        <li class="nav-item{" active" if i == 7 else ""}">'
        f'<a class="nav-link" href="/docs/{_slug(t)}/">{html.escape(t)}</a></li>'
        for i, t in enumerate(SIDEBAR_LINKS))
    header_links = "\n".join(f'      <li><a href="/{_slug(t)}/">{html.escape(t)}</a></li>' for t in HEADER_LINKS)
    footer_links = " | ".join(f'<a href="/{_slug(t)}/">{html.escape(t)}</a>' for t in FOOTER_LINKS)
    page = f"""<!DOCTYPE html>
<html lang="en" class="no-js">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <meta name="description" content="Documentation for the Example Project: {esc}">
  <meta name="generator" content="static-site-generator 1.0">
  <title>{esc} - Example Project Documentation</title>
  <link rel="stylesheet" href="/assets/css/main.css">
  <style>
    body {{ font-family: system-ui, sans-serif; margin: 0; }}
    .sidebar {{ width: 16rem; float: left; }}
    .cookie-banner {{ position: fixed; bottom: 0; }}
  </style>
  <script>
    window.dataLayer = window.dataLayer || [];
    function gtag() {{ dataLayer.push(arguments); }}
    gtag('js', new Date()); gtag('config', 'G-EXAMPLE');
  </script>
</head>
<body class="docs-page">
  <div id="cookie-consent" class="cookie-banner" role="dialog" aria-label="Cookie consent">
    <p>{COOKIE_TEXT}</p>
    <button type="button" class="btn accept">Accept all cookies</button>
    <button type="button" class="btn settings">Manage cookie preferences</button>
  </div>
  <header class="site-header">
    <a class="logo" href="/"><img src="/assets/logo.svg" alt="Example Project logo"></a>
    <nav class="top-nav" aria-label="Main">
      <ul>
{header_links}
      </ul>
    </nav>
    <form class="search" action="/search/" role="search">
      <input type="search" name="q" placeholder="Search the documentation" aria-label="Search the documentation">
    </form>
  </header>
  <div class="container">
    <aside class="sidebar">
      <nav class="docs-nav" aria-label="Documentation sections">
        <ul class="nav">
{sidebar}
        </ul>
      </nav>
    </aside>
    <main class="content" role="main">
      <nav class="breadcrumb" aria-label="Breadcrumb">
        <ol>
          <li><a href="/">Home</a></li>
          <li><a href="/docs/">Docs</a></li>
          <li aria-current="page">{esc}</li>
        </ol>
        <a class="edit-link" href="{EDIT_URL}{_slug(title)}.md">Edit this page on GitHub</a>
      </nav>
      <article class="docs-content">
{body}
      </article>
      <nav class="pager" aria-label="Pagination">
        <a class="prev" href="/docs/release-notes-archive/">Previous: Release Notes Archive</a>
        <a class="next" href="/docs/frequently-asked-questions/">Next: Frequently Asked Questions</a>
      </nav>
    </main>
  </div>
  <footer class="site-footer">
    <p>{COPYRIGHT_TEXT}</p>
    <p>{footer_links}</p>
  </footer>
  <script src="/assets/js/bundle.min.js"></script>
  <script>document.documentElement.classList.remove('no-js');</script>
</body>
</html>
"""
    return page.encode("utf-8")
