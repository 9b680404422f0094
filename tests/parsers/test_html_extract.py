"""HTML to Markdown (`knowledge.parsers.html_extract`): structure, docs pages in a site layout,
encodings, title and stated date, hostile input under the child's limits, and the benchmark."""

from __future__ import annotations

import gzip
import hashlib
import html
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections import Counter
from datetime import date
from pathlib import Path
from typing import Any

import lxml.html
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it_pyrs import MarkdownIt

from knowledge.parsers.html_extract import MAX_INPUT_BYTES, HtmlRefused, extract_html
from tests.conftest import SHARED_CORPUS, corpus_missing
from tests.helpers.hostile_html import CASES, hostile_html
from tests.helpers.render_html import CHROME_TEXTS, render_docs_page

REPO = Path(__file__).resolve().parents[2]
HTML_CORPUS = SHARED_CORPUS / "html"
DOCS = [SHARED_CORPUS / "docs-argocd", SHARED_CORPUS / "docs-etcd"]
needs_html_corpus = pytest.mark.skipif(corpus_missing(HTML_CORPUS), reason=f"no benchmark corpus at {HTML_CORPUS}")
needs_docs = pytest.mark.skipif(any(corpus_missing(d) for d in DOCS), reason="no docs corpora under shared/corpus")

#: The chunker's parser configuration (knowledge.core.chunking).
MD = MarkdownIt("commonmark").enable_many(["table", "front_matter"])


def _norm(text: str) -> str:
    return " ".join(text.split())


def _inline(node: Any) -> str:
    return "".join(n.meta.get("content", "") for n in node.walk() if n.name in ("text", "text_special", "code_inline"))


def md_headings(markdown: str) -> list[tuple[int, str]]:
    """The top-level headings the chunker sees: (level, text)."""
    return [(int(n.meta["level"]), _norm(_inline(n))) for n in MD.tree(markdown).children
            if n.name in ("heading", "lheading")]


def md_nodes(markdown: str) -> list[Any]:
    return list(MD.tree(markdown).walk())


def page(body: str, head: str = "<title>A page</title>") -> bytes:
    return f"<!DOCTYPE html><html><head><meta charset='utf-8'>{head}</head><body>{body}</body></html>".encode()


LAYOUT = """<header><a href="/">Site</a><nav><a href="/a">Products</a> <a href="/b">Pricing</a></nav></header>
<div id="cookie" role="dialog"><p>We use cookies to track you. Accept all cookies.</p></div>
<main>{}</main>
<footer><p>Copyright 2021 Example Inc. All rights reserved.</p></footer>"""


# --- structure ------------------------------------------------------------------------------------------

def test_headings_become_atx_headings_in_order() -> None:
    body = LAYOUT.format(
        "<h1>Restoring a cluster</h1><p>Restoring needs a snapshot taken from a healthy member beforehand.</p>"
        "<h2>Taking the snapshot</h2><p>Run the save command against one member and copy the file away.</p>"
        "<h3>Verifying it</h3><p>Check the hash and the revision of the saved snapshot file.</p>"
        "<h2>Restoring members</h2><p>Every member restores from the same file with a new data directory.</p>"
        "<h6>A small note</h6><p>The old data directories can be removed once the cluster is healthy again.</p>")
    text = extract_html(page(body)).text
    assert md_headings(text) == [(1, "Restoring a cluster"), (2, "Taking the snapshot"), (3, "Verifying it"),
                                 (2, "Restoring members"), (6, "A small note")]
    assert "Products" not in text and "cookies" not in text and "Copyright" not in text
    # paragraphs are separated by blank lines
    assert "\n\nRun the save command against one member and copy the file away.\n\n" in text


def test_code_blocks_are_verbatim_fenced() -> None:
    code = ("# not a heading\n```\nstill code ```` with runs\n\n    indented line\n- not a list\n"
            "<script>alert(1)</script>\n|a|b|\n")
    body = LAYOUT.format(
        "<h1>Code</h1><p>The following block must survive byte for byte in the output text.</p>"
        f"<pre><code class='language-sh'>{html.escape(code)}</code></pre>"
        "<p>And a highlighted one, split into spans by the highlighter:</p>"
        "<pre><span class='k'>def</span> <span class='n'>f</span>():<br>    <span>return</span> 1</pre>"
        "<p>The end of the page comes after the code, with more words to read.</p>")
    text = extract_html(page(body)).text
    fences = [n for n in md_nodes(text) if n.name == "fence"]
    assert [f.meta["content"] for f in fences] == [code, "def f():\n    return 1\n"]
    assert fences[0].meta["info"] == "sh"
    assert len(fences[0].meta["marker"] * fences[0].meta["marker_len"]) > 4  # longer than any run inside
    assert md_headings(text) == [(1, "Code")]


def test_lists_are_markdown_items() -> None:
    body = LAYOUT.format(
        "<h1>Steps</h1><p>Follow these steps in order to upgrade the cluster safely.</p>"
        "<ol><li>Drain the node</li><li>Upgrade it<ul><li>binary first</li><li>then config</li></ul></li>"
        "<li>Uncordon it</li></ol><ul><li>A bullet</li><li>Another bullet</li></ul>")
    text = extract_html(page(body)).text
    assert "1. Drain the node\n2. Upgrade it\n\n   - binary first\n   - then config\n3. Uncordon it" in text
    assert "- A bullet\n- Another bullet" in text
    lists = [(n.name, [_inline(li.children[0]) for li in n.children]) for n in MD.tree(text).children
             if n.name in ("ordered_list", "bullet_list")]
    assert lists == [("ordered_list", ["Drain the node", "Upgrade it", "Uncordon it"]),
                     ("bullet_list", ["A bullet", "Another bullet"])]


def test_tables_parse_as_tables() -> None:
    body = LAYOUT.format(
        "<h1>Flags</h1><p>The flags the server accepts, with their defaults and meaning.</p>"
        "<table><thead><tr><th>Flag</th><th>Default</th><th>Meaning</th></tr></thead><tbody>"
        "<tr><td><code>--data-dir</code></td><td>default.etcd</td><td>where data lives</td></tr>"
        "<tr><td>--a|b</td><td>C:\\dir</td><td></td></tr></tbody></table>"
        "<p>Unlisted flags keep their defaults, as the next section explains.</p>"
        "<table><tr><td>no</td><td>header</td></tr><tr><td>row</td><td>two</td></tr></table>")
    text = extract_html(page(body)).text
    tables = [n for n in MD.tree(text).children if n.name == "table"]
    assert len(tables) == 2
    cells = [[_inline(c) for c in row.children] for row in tables[0].walk() if row.name == "trow"]
    assert cells == [["Flag", "Default", "Meaning"], ["--data-dir", "default.etcd", "where data lives"],
                     ["--a|b", "C:\\dir", ""]]
    cells = [[_inline(c) for c in row.children] for row in tables[1].walk() if row.name == "trow"]
    assert cells == [["no", "header"], ["row", "two"]]


def test_body_lines_never_become_markdown_blocks() -> None:
    lines = ["---", "title: not front matter", "# not a heading", "Setext?", "===", "```", "~~~ x", "- dash",
             "+ plus", "* star", "1. one", "2) two", "> quote", "<script>", "<!-- c", "| a | b |", "|---|---|",
             "***", "#", "Closing ###"]
    body = "<p>" + "<br>".join(html.escape(line) for line in lines) + "</p>"
    text = extract_html(page(f"<main>{body}<p>{'More words here. ' * 5}</p></main>")).text
    top = MD.tree(text).children
    assert [n.name for n in top] == ["paragraph", "paragraph"]
    assert md_headings(text) == []
    rendered = _inline(top[0])
    for line in lines:
        assert line in rendered


def test_heading_text_keeps_its_closing_hashes() -> None:
    text = extract_html(page("<main><h2>Using C#</h2><p>Words about the language go here.</p>"
                             "<h2>Issue ##</h2><p>More words about the issue go here.</p></main>")).text
    assert md_headings(text) == [(2, "Using C#"), (2, "Issue ##")]


# --- docs pages in a site layout ---------------------------------------------------------------------------

DOC_FILES = [
    "docs-argocd/operator-manual/disaster_recovery.md",
    "docs-argocd/operator-manual/high_availability.md",
    "docs-argocd/operator-manual/rbac.md",
    "docs-argocd/operator-manual/upgrading/2.3-2.4.md",
    "docs-argocd/faq.md",
    "docs-etcd/op-guide/recovery.md",
    "docs-etcd/op-guide/clustering.md",
    "docs-etcd/op-guide/maintenance.md",
    "docs-etcd/faq.md",
]
_TITLE = re.compile(r"^title:\s*(.+?)\s*$", re.MULTILINE)
_WORD = re.compile(r"\w+")


def _doc_title(path: Path, markdown: str) -> str:
    m = _TITLE.search(markdown[:2000]) if markdown.startswith("---") else None
    return m.group(1).strip("'\"") if m else path.stem.replace("_", " ").replace("-", " ").title()


def _article(data: bytes) -> Any:
    return lxml.html.fromstring(data).xpath("//article")[0]


def _check_docs_page(path: Path) -> tuple[list[str], float]:
    """(problems, body-word recall) of one docs file served in the site layout."""
    markdown = path.read_text(encoding="utf-8")
    data = render_docs_page(markdown, _doc_title(path, markdown))
    text = extract_html(data).text
    article = _article(data)
    problems = []
    want = [(int(h.tag[1]), _norm(h.text_content())) for h in article.iter("h1", "h2", "h3", "h4", "h5", "h6")]
    if md_headings(text) != want:
        problems.append(f"headings differ: {sorted(set(want) ^ set(md_headings(text)))[:5]}")
    codes = [pre.text_content().removeprefix("\n").rstrip() for pre in article.iter("pre")]
    fences = [n.meta["content"].rstrip() for n in md_nodes(text) if n.name == "fence"]
    if [c for c in codes if c.strip()] != fences:
        problems.append("code blocks differ")
    problems += [f"chrome: {chrome!r}" for chrome in CHROME_TEXTS if chrome in text]
    want_words, have_words = Counter(_WORD.findall(article.text_content())), Counter(_WORD.findall(text))
    recall = sum(min(n, have_words[w]) for w, n in want_words.items()) / max(1, sum(want_words.values()))
    return problems, recall


@needs_docs
@pytest.mark.parametrize("name", DOC_FILES)
def test_docs_page_keeps_headings_code_and_words_without_chrome(name: str) -> None:
    problems, recall = _check_docs_page(SHARED_CORPUS / name)
    assert problems == []
    assert recall >= 0.995


@needs_docs
@pytest.mark.slow
def test_all_docs_pages() -> None:
    """Every file of both docs corpora: headings of nearly every page intact, nearly all words, no chrome."""
    files = sorted(p for d in DOCS for p in d.rglob("*.md"))
    results = {str(p): _check_docs_page(p) for p in files}
    chrome = [name for name, (problems, _) in results.items() if any(p.startswith("chrome") for p in problems)]
    assert chrome == []
    broken = [name for name, (problems, _) in results.items() if problems]
    assert len(broken) <= 0.01 * len(files), broken
    recalls = [recall for _, recall in results.values()]
    assert sum(recalls) / len(recalls) >= 0.998
    assert min(recalls) >= 0.9


def test_render_docs_page_is_deterministic_and_realistic() -> None:
    markdown = "---\ntitle: Demo\n---\n\n## First\n\nBody text.\n"
    data = render_docs_page(markdown, "Demo")
    assert data == render_docs_page(markdown, "Demo")
    tree = lxml.html.fromstring(data)
    assert len(tree.xpath("//aside//nav//a")) == 20
    assert tree.xpath("//article/h1")[0].text == "Demo"  # no h1 in the Markdown: the title is printed
    assert b"title: Demo" not in data  # front matter consumed
    assert tree.xpath("//footer") and tree.xpath("//*[@id='cookie-consent']") and tree.xpath("//header")


# --- encodings ------------------------------------------------------------------------------------------

ARTICLE = ("<article><h1>{h}</h1><p>{p}</p></article>")
FRENCH = ("Le café de la gare ouvre à sept heures; les élèves y révisent leurs leçons de français avant "
          "l'école. Müller préfère le thé, mais Zoë commande toujours un crème brûlée déjà froid.")


def test_cp1252_page_with_meta_charset() -> None:
    p = "“Quoted” text — naïve café for €5, déjà vu. " * 3
    data = ("<html><head><meta charset='windows-1252'><title>Prix</title></head><body>"
            + ARTICLE.format(h="Größe", p=p) + "</body></html>").encode("cp1252")
    text = extract_html(data).text
    assert "“Quoted” text — naïve café for €5, déjà vu." in text
    assert md_headings(text) == [(1, "Größe")]


def test_latin1_label_means_windows_1252() -> None:
    p = "The \x93smart quotes\x94 of a page labelled Latin-1 \x96 as browsers read it. " * 2
    data = (b"<html><head><meta http-equiv='Content-Type' content='text/html; charset=iso-8859-1'></head><body>"
            + ARTICLE.format(h="Quotes", p=p).encode("latin-1") + b"</body></html>")
    assert "The “smart quotes” of a page labelled Latin-1 – as browsers read it." in extract_html(data).text


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-be", "utf-8-sig", "utf-32"])
def test_bom_decides(codec: str) -> None:
    data = ("<html><head><title>Ünïcode</title></head><body>" + ARTICLE.format(h="Überschrift", p=FRENCH)
            + "</body></html>").encode(codec)
    if codec == "utf-16-be":
        data = b"\xfe\xff" + data
    result = extract_html(data)
    assert FRENCH in result.text
    assert result.title == "Ünïcode"


def test_undeclared_latin1_is_guessed() -> None:
    data = ("<html><head><title>Gare</title></head><body>" + ARTICLE.format(h="La gare", p=FRENCH * 3)
            + "</body></html>").encode("latin-1")
    text = extract_html(data).text
    assert FRENCH in text


def test_nul_and_control_characters_are_dropped() -> None:
    data = page("<main><h1>Ti\x00tle</h1><p>Body\x00 text\x07 with a few control characters.</p></main>").replace(
        b"Body", b"Bo\x00dy")
    text = extract_html(data).text
    assert "\x00" not in text and "\x07" not in text
    assert "Body text with a few control characters." in text
    assert md_headings(text) == [(1, "Title")]


@pytest.mark.parametrize("data", [bytes(range(256)) * 64, gzip.compress(page("<p>x</p>" * 999)),
                                  b"%PDF-1.7\n" + bytes(range(256)) * 8])
def test_binary_is_unreadable(data: bytes) -> None:
    with pytest.raises(HtmlRefused) as refused:
        extract_html(data)
    assert refused.value.reason == "html_unreadable"


def test_too_large_is_refused() -> None:
    with pytest.raises(HtmlRefused) as refused:
        extract_html(b" " * (MAX_INPUT_BYTES + 1))
    assert refused.value.reason == "html_too_large"


def test_scripts_only_is_no_text() -> None:
    with pytest.raises(HtmlRefused) as refused:
        extract_html(page("<script>var a = 'words words words';</script><style>p{}</style>",
                          head="<script>var b = 1;</script>"))
    assert refused.value.reason == "no_text"


def test_progress_reports_each_stage() -> None:
    seen: list[str] = []
    extract_html(page(LAYOUT.format("<h1>T</h1><p>Some words of a body.</p>")), seen.append)
    assert seen == ["decoded", "parsed", "extracted"]


# --- title and date ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("head", "body", "title"), [
    ("<title> The  title </title><meta property='og:title' content='OG'>", "<h1>H1</h1>", "The title"),
    ("<meta property='og:title' content='The OG title'>", "<h1>H1</h1>", "The OG title"),
    ("<title></title>", "<h1>The <b>H1</b> title</h1>", "The H1 title"),
    ("", "", None),
])
def test_title_fallback(head: str, body: str, title: str | None) -> None:
    result = extract_html(page(f"{body}<main><p>Words of the page body text.</p></main>", head=head))
    assert result.title == title


@pytest.mark.parametrize(("head", "body", "stated"), [
    ("<meta property='article:published_time' content='2021-03-04T23:30:00-05:00'>", "", date(2021, 3, 4)),
    ("<meta name='date' content='Thu, 04 Mar 2021 10:00:00 GMT'>", "", date(2021, 3, 4)),
    ("<script type='application/ld+json'>{\"@graph\": [{\"@type\": \"NewsArticle\", "
     "\"datePublished\": \"2019-11-18\", \"dateModified\": \"2019-11-20\"}]}</script>", "", date(2019, 11, 18)),
    ("", "<p>Posted <time datetime='2020-02-29T08:00'>last leap day</time>.</p>", date(2020, 2, 29)),
    ("", "<span itemprop='datePublished' content='2018-07-01'>July 1</span>", date(2018, 7, 1)),
    ("<meta property='article:modified_time' content='2022-05-06'>", "", date(2022, 5, 6)),
    # dates in free text, a footer year and the URL are not stated publication dates
    ("<link rel='canonical' href='https://example.com/2017/01/02/post'>",
     "<p>OpenSSL 3.0.2 15 Mar 2022 and 2021-04-05 in the text.</p><footer>© 2024 Example</footer>", None),
    ("", "<footer><time datetime='2023-01-01'>2023</time></footer>", None),
])
def test_stated_date(head: str, body: str, stated: date | None) -> None:
    result = extract_html(page(f"<main>{body}<p>Words of the page body text.</p></main>", head=head))
    assert result.stated_date == stated


@needs_docs
def test_docs_page_states_no_date() -> None:
    markdown = (SHARED_CORPUS / DOC_FILES[3]).read_text(encoding="utf-8")  # dates in its text, a copyright year
    assert extract_html(render_docs_page(markdown, "Upgrading")).stated_date is None


# --- generated documents ----------------------------------------------------------------------------------

_TEXT = st.text(alphabet=st.characters(categories=("L", "N"), include_characters=" .,:;?()'\"-/#\\"),
                min_size=1, max_size=40).filter(lambda s: bool(_WORD.search(s)))
_BLOCK = st.one_of(
    st.tuples(st.just("h"), st.integers(1, 6), _TEXT),
    st.tuples(st.just("p"), st.just(0), st.lists(_TEXT, min_size=1, max_size=4).map(". ".join)),
    st.tuples(st.sampled_from(["ul", "ol"]), st.just(0), st.lists(_TEXT, min_size=1, max_size=4).map("\n".join)),
)


def _document(blocks: list[tuple[str, int, str]], wrap: str) -> bytes:
    parts = []
    for kind, level, text in blocks:
        if kind == "h":
            parts.append(f"<h{level}>{html.escape(text)}</h{level}>")
        elif kind == "p":
            parts.append(f"<p>{html.escape(text)}</p>")
        else:
            parts.append(f"<{kind}>" + "".join(f"<li>{html.escape(t)}</li>" for t in text.split("\n")) + f"</{kind}>")
    body = "".join(parts)
    return page(f"<{wrap}>{body}</{wrap}>" if wrap else body)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_BLOCK, min_size=1, max_size=10), st.sampled_from(["main", "article", "div", ""]))
def test_generated_documents_keep_their_headings(blocks: list[tuple[str, int, str]], wrap: str) -> None:
    try:
        result = extract_html(_document(blocks, wrap))
    except HtmlRefused as refused:  # the only exception allowed; these documents all have text
        pytest.fail(f"refused: {refused}")
    want = [(level, _norm(text)) for kind, level, text in blocks if kind == "h" and _norm(text)]
    assert md_headings(result.text) == want


# --- hostile input, as the parser child runs it ---------------------------------------------------------

_CHILD = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))
from knowledge.parsers.html_extract import HtmlRefused, extract_html, preload
from tests.helpers.hostile_html import hostile_case
preload()
data, allowed = hostile_case(sys.argv[1])
try:
    result = extract_html(data)
    outcome = "ok"
    assert "\\x00" not in result.text
except HtmlRefused as refused:
    outcome = refused.reason
print(json.dumps({"outcome": outcome}))
"""
_BIG = {"text_line_10mib", "text_line_9mb", "minified_10mib", "random_32mib", "over_32mib", "many_elements_400k",
        "table_1m_cells", "unclosed_comment"}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is the child's limit on Linux only")
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in _BIG else n for n in CASES])
def test_hostile_input_ends_within_its_outcomes(name: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", _CHILD, name], capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=300, check=False)  # a hang guard only; nothing here asserts a time
    assert done.returncode == 0, done.stderr[-2000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])["outcome"]
    assert outcome in CASES[name][1]


@pytest.mark.slow
def test_hostile_set_is_deterministic() -> None:
    first = [(name, hashlib.sha256(data).hexdigest(), allowed) for name, data, allowed in hostile_html()]
    second = [(name, hashlib.sha256(data).hexdigest(), allowed) for name, data, allowed in hostile_html()]
    assert first == second
    assert [name for name, _, _ in first] == list(CASES)


# --- the benchmark ----------------------------------------------------------------------------------------

def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_html", REPO / "scripts" / "bench_html.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_scoring_matches_evaluate_py() -> None:
    bench = _bench()
    assert bench.score_page("a b c d e", "a b c d e") == (1.0, 0.0, 0.0)
    tp, fp, fn = bench.score_page("one two three four five", "one two three four")
    assert (tp, fp, fn) == pytest.approx((0.5, 0.0, 0.5))  # shingles: 2 true, 1 predicted, 1 shared
    assert bench.score_page("", "") == (0.0, 0.0, 0.0)
    p, r, f = bench.metrics([(1.0, 0.0, 0.0), (0.5, 0.5, 0.0), (0.0, 0.0, 0.0)])
    assert (p, r) == pytest.approx((0.75, 1.0))  # the all-zero page counts in neither mean
    assert f == pytest.approx(2 * 0.75 / 1.75)


@needs_html_corpus
@pytest.mark.slow
def test_benchmark_mean_f1() -> None:
    bench = _bench()
    pages = bench.load(HTML_CORPUS)
    assert len(pages) == 181
    rows = [bench.score_page(true, bench.ours(data)) for _, data, true in pages]
    assert bench.metrics(rows)[2] >= 0.955
