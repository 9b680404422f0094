"""The PDF logic in process (`knowledge.parsers.pdf_extract`) over the shared corpus and synthetic PDFs, and the
parser child (`python -m knowledge.parsers.child`) through its stdin/stdout protocol and its own limits.

Bomb files are not parsed in process here (they may take minutes or gigabytes): the pool's tests run
them under the child's limits. The 412-page manual runs once, in the outline test (~18 s).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pikepdf
import pytest
from markdown_it_pyrs import MarkdownIt
from pikepdf import Dictionary, Name

from knowledge.core.normalize import normalize
from knowledge.parsers import pdf_extract
from knowledge.parsers.child import MAX_PROGRESS_BYTES, OPEN_FILES
from knowledge.parsers.pdf_extract import PdfRefused, extract_pdf_text, inspect_pdf_bytes
from tests.conftest import corpus_missing

ROOT = Path(__file__).resolve().parents[2]
PDFS = ROOT.parent / "shared" / "corpus" / "pdf"
needs_corpus = pytest.mark.skipif(corpus_missing(PDFS / "MANIFEST.tsv"), reason="shared corpus not present")
MD = MarkdownIt("commonmark").enable_many(["table", "front_matter"])  # the chunker's parser and options
DERIVED_HEADING = re.compile(r"^(#{1,6}) (.+)$", re.MULTILINE)


def manifest() -> list[dict[str, str]]:
    if not (PDFS / "MANIFEST.tsv").exists():
        return []
    with (PDFS / "MANIFEST.tsv").open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def wanted(row: dict[str, str]) -> str:
    """Our outcome for a manifest row: any encryption is refused, whatever a password-less reader
    recovers (the notes' "opens without password" files too); ``refuse`` otherwise means the file
    cannot be opened (``pdf_unreadable``); ``empty`` is ``no_text``."""
    if row["category"].startswith("encrypted"):
        return "pdf_encrypted"
    return {"text": "text", "empty": "no_text", "refuse": "pdf_unreadable"}[row["expected"]]


def outcome(data: bytes) -> tuple[str, str]:
    try:
        return "text", extract_pdf_text(data)
    except PdfRefused as refused:
        return refused.reason, ""


def markdown_headings(text: str) -> list[tuple[int, str]]:
    """(level, source line) of every top-level heading the chunker's parser finds in ``text``."""
    normalized = normalize(text)
    raw = normalized.encode("utf-8")
    found = []
    for node in MD.tree(normalized).children:
        if node.name in ("heading", "lheading") and node.srcmap is not None:
            source = raw[node.srcmap[0]:node.srcmap[1]].decode("utf-8").strip()
            found.append((int(node.meta["level"]), source))
    return found


def derived_headings(text: str) -> list[tuple[int, str]]:
    """The heading lines the extractor wrote: the only lines at column 0 that start with ``#`` + space."""
    return [(len(m[1]), m[0]) for m in DERIVED_HEADING.finditer(text)]


# --- synthetic PDFs (corpus-independent) --------------------------------------------------------------

Item = tuple[float, float, float, str]  # font size, x, y, text


def _escape(text: str) -> bytes:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)").encode("latin-1")


def make_pdf(pages: list[list[Item]], outline: Sequence[tuple[str, int]] = (), standard_encoding: bool = False,
             **save: Any) -> bytes:
    """A PDF with Helvetica text items per page (WinAnsi, or the font's own StandardEncoding) and an
    optional flat outline of (title, page index)."""
    pdf = pikepdf.new()
    font = pdf.make_indirect(Dictionary(Type=Name.Font, Subtype=Name.Type1, BaseFont=Name.Helvetica))
    if not standard_encoding:
        font.Encoding = Name.WinAnsiEncoding
    for items in pages:
        ops = b"".join(b"BT /F1 %g Tf %g %g Td (%s) Tj ET\n" % (size, x, y, _escape(text))
                       for size, x, y, text in items)
        page = pdf.add_blank_page(page_size=(612, 792))
        page.Resources = Dictionary(Font=Dictionary(F1=font))
        page.Contents = pdf.make_stream(ops)
    if outline:
        with pdf.open_outline() as tree:
            for title, index in outline:
                tree.root.append(pikepdf.OutlineItem(title, index))
    buf = io.BytesIO()
    pdf.save(buf, **save)
    return buf.getvalue()


def body(y0: float, lines: list[str], size: float = 10) -> list[Item]:
    return [(size, 72, y0 - 12 * i, line) for i, line in enumerate(lines)]


PROSE = ["This is the body text of the section, set in the body font size,",
         "long enough that the body size is the most common size by far,",
         "and it goes on for a few lines so the layout makes a paragraph."]


# --- the corpus ---------------------------------------------------------------------------------------

CORPUS = [pytest.param(row, id=row["file"]) for row in manifest() if row["category"] not in ("bomb", "large")]


@needs_corpus
@pytest.mark.parametrize("row", CORPUS)
def test_corpus_pdf_ends_as_the_manifest_says(row: dict[str, str]) -> None:
    data = (PDFS / row["file"]).read_bytes()
    got, text = outcome(data)
    assert got == wanted(row), row["note"]
    if got == "text":
        assert text.strip()
        assert "\x00" not in text
        text.encode("utf-8")  # no lone surrogates: the child must be able to send it
        pages = inspect_pdf_bytes(data).pages
        assert text.count("\f") == pages  # every page once, each closed by a form feed
        # The derived headings are the only top-level headings the chunker's parser sees: a body line
        # such as "# content of conftest.py" never becomes one, nor swallows one into a code block.
        assert markdown_headings(text) == derived_headings(text)
    elif got == "pdf_encrypted":
        with pytest.raises(PdfRefused) as refused:  # upload inspection already refuses them
            inspect_pdf_bytes(data)
        assert refused.value.reason == got
    elif got == "pdf_unreadable":  # pikepdf may repair what pdfminer then cannot read: inspection passes
        try:
            inspect_pdf_bytes(data)
        except PdfRefused as refused:
            assert refused.reason == "pdf_unreadable"
    else:
        assert inspect_pdf_bytes(data).pages >= 1  # no_text: it opens, it just has no text layer


@needs_corpus
def test_owner_only_encryption_is_refused_although_pdfminer_reads_it() -> None:
    from pdfminer.high_level import extract_text

    owner_only = [r for r in manifest() if r["category"] == "encrypted_owner" and r["expected"] == "text"]
    assert len(owner_only) >= 3
    for row in owner_only:
        path = PDFS / row["file"]
        assert extract_text(str(path)).strip(), f"{row['file']}: pdfminer silently decrypts it"
        with pikepdf.open(path) as pdf:
            assert pdf.is_encrypted
        for call in (extract_pdf_text, inspect_pdf_bytes):
            with pytest.raises(PdfRefused) as refused:
                call(path.read_bytes())
            assert refused.value.reason == "pdf_encrypted"


def test_synthetic_encryption_is_refused_whatever_the_passwords() -> None:
    from pdfminer.high_level import extract_text

    page = [body(700, PROSE)]
    owner_only = make_pdf(page, encryption=pikepdf.Encryption(owner="owner", user="", aes=True))
    user = make_pdf(page, encryption=pikepdf.Encryption(owner="owner", user="user"))
    assert "body text" in extract_text(io.BytesIO(owner_only))  # pdfminer would have answered
    for data in (owner_only, user):
        with pytest.raises(PdfRefused) as refused:
            extract_pdf_text(data)
        assert refused.value.reason == "pdf_encrypted"


def outline_titles(data: bytes) -> list[tuple[int, str]]:
    result: list[tuple[int, str]] = []
    with pikepdf.open(io.BytesIO(data)) as pdf:
        def walk(items: list[pikepdf.OutlineItem], depth: int) -> None:
            for item in items:
                result.append((depth, item.title))
                walk(item.children, depth + 1)

        walk(pdf.open_outline().root, 1)
    return result


@needs_corpus
@pytest.mark.parametrize("name", ["pypdf__pdflatex-outline.pdf", "pdfminer__pagelabels.pdf"])
def test_outline_entries_become_headings_in_outline_order(name: str) -> None:
    data = (PDFS / name).read_bytes()
    titles = outline_titles(data)
    assert titles and inspect_pdf_bytes(data).has_outline
    text = extract_pdf_text(data)
    headings = derived_headings(text)
    # Named destinations resolved, each entry placed at its own heading line ("1 Foo"), in order.
    assert [level for level, _ in headings] == [depth for depth, _ in titles]
    for (_, line), (_, title) in zip(headings, titles, strict=True):
        assert line.casefold().endswith(" " + title.casefold())
    # The heading replaced its line: the section's title is not repeated as body text right after it.
    first = headings[0][1]
    after = text[text.index(first + "\n") + len(first):]
    assert not after.lstrip().startswith(first.lstrip("# "))
    assert markdown_headings(text) == headings


@pytest.mark.slow
@needs_corpus
def test_a_large_manual_gets_outline_headings_and_deeper_ones_from_font_sizes() -> None:
    large = next(r["file"] for r in manifest() if r["category"] == "large")
    data = (PDFS / large).read_bytes()
    titles = outline_titles(data)
    text = extract_pdf_text(data)
    assert text.count("\f") == 412 and len(text) > 700_000
    headings = derived_headings(text)
    outline_level = [h for h in headings if h[0] <= 2]
    assert [level for level, _ in outline_level] == [depth for depth, _ in titles]
    for (_, line), (_, title) in zip(outline_level, titles, strict=True):
        assert line.casefold().endswith(title.casefold())
    deeper = [line for level, line in headings if level == 3]
    assert "### 1.1.1 Install pytest" in deeper and len(deeper) > 100  # Sphinx subsections, not in the outline
    assert headings[0] == (1, "# START HERE")  # nothing deeper before the outline's first heading
    # Code comments ("# content of test_sample.py") stay body text, indented out of heading syntax.
    assert "\n    # content of test_sample.py\n" in text
    assert markdown_headings(text) == headings


def test_font_sizes_make_headings_when_there_is_no_outline() -> None:
    data = make_pdf([
        [(24, 72, 740, "A Report on Things"), *body(700, PROSE),
         (14, 72, 640, "1 First part"), *body(620, PROSE),
         (14, 72, 560, "2 Second part that has a title long enough"), (14, 72, 544, "to wrap onto a second line"),
         *body(520, PROSE), (14, 72, 460, "42")],
    ])
    text = extract_pdf_text(data)
    assert derived_headings(text) == [(1, "# A Report on Things"), (2, "## 1 First part"),
                                      (2, "## 2 Second part that has a title long enough to wrap onto a second line")]
    assert "\n42\n" in text  # a size alone does not make a heading: it needs a letter
    assert markdown_headings(text) == derived_headings(text)


def test_outline_without_a_matching_line_inserts_the_heading_at_its_page() -> None:
    data = make_pdf([[*body(700, PROSE)], [*body(700, PROSE)]], outline=[("Part one", 0), ("Part two", 1)])
    text = extract_pdf_text(data)
    pages = text.split("\f")
    assert pages[0].startswith("# Part one\n\n") and pages[1].lstrip("\n").startswith("# Part two\n\n")


def test_body_lines_never_become_markdown_structure() -> None:
    hazards = ["# not a heading", "## nor this", "```", "~~~ python", "<pre>", "<!-- open", "===", "---",
               "#hashtag is fine as is", "a line with a # inside"]
    data = make_pdf([[(16, 72, 740, "The Only Heading"), *body(700, ["Intro line", *hazards, "last line"])]])
    text = extract_pdf_text(data)
    assert derived_headings(text) == [(1, "# The Only Heading")]
    assert markdown_headings(text) == [(1, "# The Only Heading")]
    lines = text.split("\n")
    for hazard in hazards:  # verbatim, at most indented: whitespace is the only change
        assert hazard in [line.strip() for line in lines]
    assert "    # not a heading" in lines and "#hashtag is fine as is" in lines


def test_text_is_cleaned_of_what_is_not_text() -> None:
    assert pdf_extract._clean("a\x00b\x07c\ufb01n\ufb02y\ud800z\x85") == "abcfinfly\ufffdz"
    # Helvetica's StandardEncoding puts the "fi" ligature at \256: pdfminer reads U+FB01.
    data = make_pdf([[(12, 72, 700, "ef\256cient de\256nition")]], standard_encoding=True)
    assert "efficient definition" in extract_pdf_text(data)


def test_no_text_layer_is_refused_and_a_textless_range_is_only_form_feeds() -> None:
    blank = make_pdf([[], []])
    with pytest.raises(PdfRefused) as refused:
        extract_pdf_text(blank)
    assert refused.value.reason == "no_text"
    assert extract_pdf_text(blank, (0, 2)) == "\f\n\n\f\n\n"
    mixed = make_pdf([[], [*body(700, PROSE)]])
    assert extract_pdf_text(mixed, (0, 1)).strip() == ""
    assert extract_pdf_text(mixed).count("\f") == 2


def test_page_ranges_concatenate_into_the_whole() -> None:
    data = make_pdf([[*body(700, [f"page {i} says hello", *PROSE])] for i in range(5)],
                    outline=[(f"page {i} says hello", i) for i in range(5)])
    whole = extract_pdf_text(data)
    assert extract_pdf_text(data, (0, 2)) + extract_pdf_text(data, (2, 5)) == whole
    assert len(derived_headings(whole)) == 5
    with pytest.raises(ValueError, match="page range"):
        extract_pdf_text(data, (5, 7))


def test_size_and_garbage_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    for data, reason in [(b"%PDF-1.4\n" + bytes(33 * 1024 * 1024), "pdf_too_large"),
                         (b"this is not a PDF at all", "pdf_unreadable"), (b"", "pdf_unreadable")]:
        for call in (extract_pdf_text, inspect_pdf_bytes):
            with pytest.raises(PdfRefused) as refused:
                call(data)
            assert refused.value.reason == reason
    monkeypatch.setattr(pdf_extract, "MAX_PAGES", 3)
    with pytest.raises(PdfRefused) as refused:
        extract_pdf_text(make_pdf([[*body(700, PROSE)]] * 4))
    assert refused.value.reason == "pdf_too_large"
    with pytest.raises(ValueError, match="reason"):
        PdfRefused("something_else", "not a reason code")


def test_inspection_marker_is_json_safe() -> None:
    marker = inspect_pdf_bytes(make_pdf([[*body(700, PROSE)]], outline=[("Top", 0)])).as_marker()
    assert json.loads(json.dumps(marker)) == marker
    assert marker["pages"] == 1 and marker["encrypted"] is False and marker["has_outline"] is True
    assert isinstance(marker["pdf_version"], str)


# --- the child, through its protocol ------------------------------------------------------------------

CHILD = [sys.executable, "-m", "knowledge.parsers.child"]


def header(op: str, cpu_seconds: int = 20, address_space_bytes: int | None = 512 * 1024 * 1024,
           **extra: object) -> bytes:
    return json.dumps({"op": op, "cpu_seconds": cpu_seconds, "address_space_bytes": address_space_bytes,
                       **extra}).encode() + b"\n"


def run_child(payload: bytes, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*CHILD, *args], input=payload, capture_output=True, timeout=timeout, cwd=ROOT)


PROGRESS_LINE = re.compile(rb"~(?:pages \d+|document|page)\n")


def one_result(done: subprocess.CompletedProcess[bytes]) -> dict[str, Any]:
    """The child's one JSON object, after its progress lines (``~...``, extract only), which must be
    well formed and at most `MAX_PROGRESS_BYTES` each."""
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    out = done.stdout
    while out.startswith(b"~"):
        line = PROGRESS_LINE.match(out)
        assert line is not None and len(line.group()) <= MAX_PROGRESS_BYTES, out[:80]
        out = out[line.end():]
    result: dict[str, Any] = json.loads(out.decode("utf-8"))  # then exactly one JSON object, nothing else
    return result


@pytest.mark.slow
def test_child_round_trip_for_inspect_and_extract() -> None:
    data = make_pdf([[(18, 72, 740, "Child Title"), *body(700, PROSE)]])
    inspected = one_result(run_child(header("inspect") + data))
    assert inspected == {"ok": True, "inspection": {"pages": 1, "encrypted": False, "has_outline": False,
                                                    "pdf_version": inspect_pdf_bytes(data).pdf_version}}
    extracted = one_result(run_child(header("extract") + data))
    assert extracted == {"ok": True, "text": extract_pdf_text(data), "pages": 1, "date": None}  # it states none
    assert extracted["text"].startswith("# Child Title\n")
    # A spare child (libraries imported before the header) answers the same; so does a page range.
    assert one_result(run_child(header("extract", pages=[0, 1]) + data, "--warm")) == extracted


@pytest.mark.slow
def test_child_refusals_are_results() -> None:
    oversized = one_result(run_child(header("extract") + b"%PDF-1.4\n" + bytes(33 * 1024 * 1024)))
    assert oversized["ok"] is False and oversized["reason"] == "pdf_too_large"
    garbage = one_result(run_child(header("extract") + os.urandom(4096)))
    assert garbage["ok"] is False and garbage["reason"] == "pdf_unreadable" and garbage["message"]
    encrypted = make_pdf([[*body(700, PROSE)]], encryption=pikepdf.Encryption(owner="o", user=""))
    assert one_result(run_child(header("inspect") + encrypted))["reason"] == "pdf_encrypted"
    assert one_result(run_child(header("extract") + make_pdf([[]])))["reason"] == "no_text"
    for bad in (b"not json\n", b'{"op": "explode"}\n', b'{"op": "extract", "cpu_seconds": "ten"}\n',
                b'{"op": "extract", "pages": [3, 1]}\n', b"{" + b" " * 70_000):
        result = one_result(run_child(bad + b"%PDF-1.4"))
        assert result["ok"] is False and result["reason"] == "pdf_unreadable"


def proc_limits(pid: int) -> dict[str, tuple[str, str]]:
    limits = {}
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines()[1:]:
        name, soft, hard = line[:26].strip(), *line[26:].split()[:2]
        limits[name] = (soft, hard)
    return limits


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/limits")
def test_child_sets_its_limits_before_reading_the_pdf() -> None:
    process = subprocess.Popen([*CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               cwd=ROOT)
    try:
        assert process.stdin is not None
        process.stdin.write(header("extract", cpu_seconds=7, address_space_bytes=300 * 1024 * 1024))
        process.stdin.flush()  # the header only: the child now sets its limits, then waits for the PDF
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until the last limit the child sets (set_limits' order)
            limits = proc_limits(process.pid)
            if limits["Max open files"] == (str(OPEN_FILES),) * 2:
                break
            time.sleep(0.02)
        assert limits["Max cpu time"] == ("7", "8")
        assert limits["Max address space"] == (str(300 * 1024 * 1024),) * 2
        assert limits["Max core file size"] == ("0", "0")
        assert limits["Max file size"] == ("0", "0")
        assert limits["Max open files"] == (str(OPEN_FILES),) * 2
        out, _ = process.communicate(b"", timeout=30)
        assert json.loads(out)["reason"] == "pdf_unreadable"  # no bytes: not a PDF
    finally:
        process.kill()
        process.wait()


def slow_pdf(operations: int = 2000) -> bytes:
    """A 9 KB PDF whose one page takes pdfminer's layout analysis ~30 s of CPU (text boxes grouped
    pairwise): a stand-in for the corpus's slow bomb that needs no corpus."""
    pdf = pikepdf.new()
    font = pdf.make_indirect(Dictionary(Type=Name.Font, Subtype=Name.Type1, BaseFont=Name.Helvetica))
    ops = b"".join(b"BT /F1 1 Tf %d %d Td (spin spin) Tj ET\n" % (i % 600, (i * 7) % 780) for i in range(operations))
    page = pdf.add_blank_page(page_size=(612, 792))
    page.Resources = Dictionary(Font=Dictionary(F1=font))
    page.Contents = pdf.make_stream(ops)
    buf = io.BytesIO()
    pdf.save(buf, compress_streams=True)
    return buf.getvalue()


@pytest.mark.slow
def test_child_cpu_limit_stops_a_slow_parse() -> None:
    before = os.times()
    done = run_child(header("extract", cpu_seconds=1) + slow_pdf(), timeout=40)
    after = os.times()
    # Without RLIMIT_CPU the parse runs ~30 s and exits 0 with text; with it, SIGXCPU (soft) or
    # SIGKILL (hard, one second later) ends it.
    assert done.returncode in (-signal.SIGXCPU, -signal.SIGKILL), (done.returncode, done.stdout[:200])
    # CPU seconds, not wall time: the limit is what ended it (about 30 s of CPU without it).
    assert after.children_user + after.children_system - before.children_user - before.children_system < 4


def flate_bomb(mib: int = 600) -> bytes:
    """A ~0.6 MB PDF whose content stream inflates to ``mib`` MiB (pdfminer inflates it whole)."""
    deflate = zlib.compressobj(9)
    chunk = b" " * (1 << 20)
    compressed = b"".join([*(deflate.compress(chunk) for _ in range(mib)), deflate.flush()])
    pdf = pikepdf.new()
    page = pdf.add_blank_page(page_size=(612, 792))
    stream = pdf.make_stream(b"")
    stream.write(compressed, filter=Name.FlateDecode)
    page.Contents = stream
    buf = io.BytesIO()
    pdf.save(buf, stream_decode_level=pikepdf.StreamDecodeLevel.none)
    return buf.getvalue()


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is set on Linux only")
def test_child_address_space_limit_turns_a_decompression_bomb_into_a_result() -> None:
    bomb = flate_bomb()
    assert len(bomb) < 1024 * 1024
    started = time.monotonic()
    done = run_child(header("extract", cpu_seconds=20, address_space_bytes=256 * 1024 * 1024) + bomb, timeout=60)
    # The 600 MiB inflate fails at the 256 MiB limit: a MemoryError answered as pdf_killed (or, had
    # the allocation killed the process, a death the pool reports the same way). Without the limit
    # the child inflates it all and answers no_text after ~5 s. Never text.
    if done.returncode == 0:
        assert one_result(done) == {"ok": False, "reason": "pdf_killed",
                                           "message": "the parse exceeded its memory limit"}
    else:
        assert done.returncode < 0
    assert time.monotonic() - started < 20
