"""Slow hostile PDFs, made here (no corpus file is slow enough per page): each page costs pdfminer a
set amount of CPU while the file stays small, so a parser child reports its pages steadily — never
stalls — yet cannot finish within any honest budget. Deterministic, and cheap to make (< 0.5 s).

- `text_ops_pdf`: pages that share one content stream of many tiny text-show operations (each
  character placed on its own: pdfminer's layout analysis pays for every one); ~40,000 operations
  cost ~1 CPU second a page, the file ~18 KB.
- `nested_forms_pdf`: pages that draw a form XObject that draws another, ``fanout`` times, ``depth``
  deep: pdfminer interprets ``fanout ** depth`` leaf forms a page.
- `steady_pdf`: a large one, like a long manual — ~2,000 pages of ~0.1 CPU second each, padded with
  a small unique stream per page to ~0.9 MB (a PDF above `knowledge.parsers.pdf.SPLIT_BYTES`: inspected,
  and split when nobody waits).

Used by ``tests/supervisors/test_pool_fairness.py`` and ``scripts/stress_parser_pool.py --fairness``.
"""

from __future__ import annotations

import io
import zlib

import pikepdf


def _font(pdf: pikepdf.Pdf) -> pikepdf.Object:
    return pdf.make_indirect(pikepdf.Dictionary(Type=pikepdf.Name.Font, Subtype=pikepdf.Name.Type1,
                                                BaseFont=pikepdf.Name.Helvetica))


def _flate(pdf: pikepdf.Pdf, body: bytes, **keys: pikepdf.Object) -> pikepdf.Stream:
    stream = pdf.make_stream(b"", **keys)
    stream.write(zlib.compress(body, 9), filter=pikepdf.Name.FlateDecode)
    return stream


def _saved(pdf: pikepdf.Pdf) -> bytes:
    buffer = io.BytesIO()
    pdf.save(buffer, stream_decode_level=pikepdf.StreamDecodeLevel.none, compress_streams=False,
             object_stream_mode=pikepdf.ObjectStreamMode.disable, deterministic_id=True)
    return buffer.getvalue()


def _text_ops(ops: int) -> bytes:
    """``ops`` one-character text-show operations, rows of 200, in one text object."""
    parts = [b"BT /F1 1 Tf"]
    for i in range(ops):
        parts.append(b"1 0 Td (a) Tj" if i % 200 else b"-199 1 Td (a) Tj")
    parts.append(b"ET")
    return b"\n".join(parts)


def text_ops_pdf(pages: int = 100, ops: int = 40_000, pad: int = 0) -> bytes:
    """``pages`` pages sharing one content stream of ``ops`` tiny text operations (~25 µs of pdfminer
    each); with ``pad``, each page also has a unique stream of about that many bytes (file size)."""
    pdf = pikepdf.new()
    font = _font(pdf)
    shared = _flate(pdf, _text_ops(ops))
    for n in range(pages):
        page = pdf.add_blank_page(page_size=(612, 792))
        page.Resources = pikepdf.Dictionary(Font=pikepdf.Dictionary(F1=font))
        if pad:
            filler = bytes(48 + (n * 7 + k) % 64 for k in range(pad))  # printable, no newline
            page.Contents = pikepdf.Array([shared, pdf.make_stream(b"q Q\n%" + filler + b"\n")])
        else:
            page.Contents = shared
    return _saved(pdf)


def nested_forms_pdf(pages: int = 100, depth: int = 3, fanout: int = 18) -> bytes:
    """``pages`` pages each drawing a form that draws the next level ``fanout`` times, ``depth``
    levels deep, down to a form that shows one character."""
    pdf = pikepdf.new()
    font = _font(pdf)
    bbox = pikepdf.Array([0, 0, 612, 792])
    form = _flate(pdf, b"BT /F1 8 Tf 10 10 Td (a) Tj ET", Type=pikepdf.Name.XObject, Subtype=pikepdf.Name.Form,
                  BBox=bbox, Resources=pikepdf.Dictionary(Font=pikepdf.Dictionary(F1=font)))
    for _ in range(depth):
        draws = b"\n".join(b"q 1 0 0 1 %d 0 cm /X Do Q" % (i % 3) for i in range(fanout))
        form = _flate(pdf, draws, Type=pikepdf.Name.XObject, Subtype=pikepdf.Name.Form, BBox=bbox,
                      Resources=pikepdf.Dictionary(XObject=pikepdf.Dictionary(X=form)))
    shared = _flate(pdf, b"/X Do")
    for _ in range(pages):
        page = pdf.add_blank_page(page_size=(612, 792))
        page.Resources = pikepdf.Dictionary(XObject=pikepdf.Dictionary(X=form))
        page.Contents = shared
    return _saved(pdf)


def steady_pdf(pages: int = 2000, ops: int = 4000, pad: int = 200) -> bytes:
    """A large steady file: ``pages`` pages of ~0.1 CPU second each, ~0.9 MB."""
    return text_ops_pdf(pages, ops, pad)
