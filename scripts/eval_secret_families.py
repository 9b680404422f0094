"""Recall and false refusals of the ingest secret scan per family, on generated documents of unseen shapes.

    .venv/bin/python scripts/eval_secret_families.py [--seed 32] [--heldout] [--pdf] [--misses FAMILY ...]

Runs `knowledge.core.scan.find_secrets` in process over the records of scripts/build_secrets.py (a
non-empty result is a refusal). For each part (``fit``: the shapes the scan may be tuned on; ``check``:
whole shapes held out) and family it prints the records and how many were caught (secret families) or
refused (clean families), then recall and the false-refusal rate per part (``--heldout`` adds the part
``heldout``: the shapes of scripts/secret_shapes_heldout.py, written after the check part was seen), the
mean scan time per record, and a control: the same generated prose with no snippet, which must never be
refused. ``--misses FAMILY`` (or ``all``) lists the shapes whose records were missed or falsely refused,
with counts and, for false refusals, the finding kinds; never the texts.

``--pdf`` renders every document as a PDF first (one text line per PDF line, Helvetica 8 pt, 60 lines a page)
and scans what the product's PDF extraction (`knowledge.parsers.pdf_extract.extract_pdf_text`, in process)
makes of it, normalized as ingest normalizes it: the same documents, through the PDF path (~2 minutes).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from build_secrets import FAMILIES, HELDOUT, PER_SHAPE, build, filler  # noqa: E402  (scripts/ is on sys.path: this file's folder)
from secret_formats import SECRET_FAMILIES  # noqa: E402

from knowledge.core.normalize import normalize  # noqa: E402
from knowledge.core.scan import SECRET_SCAN_VERSION, find_secrets  # noqa: E402
from knowledge.parsers.pdf_extract import extract_pdf_text  # noqa: E402

PARTS = ("fit", "check")


def as_pdf(text: str, lines_per_page: int = 60) -> bytes:
    """``text`` set line by line in Helvetica 8 pt (WinAnsi: what Latin-1 cannot hold becomes '?')."""
    import io

    import pikepdf
    from pikepdf import Dictionary, Name

    pdf = pikepdf.new()
    font = pdf.make_indirect(Dictionary(Type=Name.Font, Subtype=Name.Type1, BaseFont=Name.Helvetica,
                                        Encoding=Name.WinAnsiEncoding))
    lines = text.split("\n")
    for first in range(0, len(lines), lines_per_page):
        ops = b"".join(
            b"BT /F1 8 Tf 36 %d Td (%s) Tj ET\n" % (760 - 12 * i, line.replace("\\", "\\\\").replace("(", "\\(")
                                                    .replace(")", "\\)").encode("latin-1", "replace"))
            for i, line in enumerate(lines[first:first + lines_per_page]) if line.strip())
        page = pdf.add_blank_page(page_size=(612, 792))
        page.Resources = Dictionary(Font=Dictionary(F1=font))
        page.Contents = pdf.make_stream(ops)
    buf = io.BytesIO()
    pdf.save(buf)
    return buf.getvalue()


def share(part: int, whole: int) -> str:
    return f"{part / whole:.3f}" if whole else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=32)
    parser.add_argument("--misses", nargs="+", metavar="FAMILY", choices=(*FAMILIES, "all"), default=[],
                        help="list the shapes missed or falsely refused in these families ('all': every family)")
    parser.add_argument("--heldout", action="store_true", help="add the heldout part (secret_shapes_heldout)")
    parser.add_argument("--pdf", action="store_true", help="scan each document as the PDF path extracts it")
    args = parser.parse_args()
    parts = (*PARTS, HELDOUT) if args.heldout else PARTS
    col = 9 if args.heldout else 7  # the part column

    started = time.perf_counter()
    records = build(args.seed, args.heldout)
    if args.pdf:
        for record in records:
            record["text"] = normalize(extract_pdf_text(as_pdf(record["text"])))
    built = time.perf_counter() - started

    refused: dict[str, list[str]] = {}
    scanning = 0.0
    for record in records:
        t0 = time.perf_counter()
        findings = find_secrets(record["text"])
        scanning += time.perf_counter() - t0
        refused[record["id"]] = sorted({f.kind for f in findings})

    total: Counter[tuple[str, str]] = Counter()
    flagged: Counter[tuple[str, str]] = Counter()
    wrong: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)  # (family, shape) -> part -> wrong records
    kinds: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for record in records:
        key = (record["part"], record["family"])
        total[key] += 1
        hit = bool(refused[record["id"]])
        flagged[key] += hit
        if hit != (record["label"] == "secret"):
            wrong[record["family"], record["shape"]][record["part"]] += 1
            kinds[record["family"], record["shape"]].update(refused[record["id"]])

    size = sum(len(r["text"]) for r in records) / len(records)
    print(f"find_secrets ({SECRET_SCAN_VERSION}) on {len(records)} generated documents"
          f"{' as PDFs' if args.pdf else ''} (seed {args.seed}, "
          f"built in {built:.1f} s, mean {size / 1000:.1f} k characters)")
    print(f"{'part':<{col}}{'family':<20}{'label':<8}{'records':>8}  {'caught/refused':>14}  {'share':>6}")
    for part in parts:
        for family in FAMILIES:
            label = "secret" if family in SECRET_FAMILIES else "clean"
            verb = "caught" if label == "secret" else "refused"
            n, k = total[part, family], flagged[part, family]
            print(f"{part:<{col}}{family:<20}{label:<8}{n:>8}  {f'{k} {verb}':>14}  {share(k, n):>6}")
        secrets = sum(total[part, f] for f in SECRET_FAMILIES)
        caught = sum(flagged[part, f] for f in SECRET_FAMILIES)
        cleans = sum(total[part, f] for f in FAMILIES if f not in SECRET_FAMILIES)
        false = sum(flagged[part, f] for f in FAMILIES if f not in SECRET_FAMILIES)
        print(f"{part:<{col}}recall {share(caught, secrets)} ({caught}/{secrets}), "
              f"false-refusal rate {share(false, cleans)} ({false}/{cleans})\n")
    print(f"scan time: mean {scanning / len(records) * 1000:.2f} ms per record ({scanning:.2f} s in all)")
    control = filler(args.seed)
    control_refused = sum(bool(find_secrets(doc)) for doc in control)
    print(f"control (the same prose, no snippet): {control_refused} of {len(control)} refused")

    chosen = FAMILIES if "all" in args.misses else tuple(f for f in FAMILIES if f in args.misses)
    for family in chosen:
        what = "missed" if family in SECRET_FAMILIES else "falsely refused"
        rows = sorted((shape, by_part) for (fam, shape), by_part in wrong.items() if fam == family)
        print(f"\n{family}: shapes {what} (records of {PER_SHAPE} per shape, by part)")
        if not rows:
            print("  none")
        for shape, wrong_by_part in rows:
            counts = ", ".join(f"{part} {wrong_by_part[part]}" for part in parts if wrong_by_part[part])
            found = ", ".join(f"{kind} x{n}" for kind, n in kinds[family, shape].most_common())
            print(f"  {shape:<44}{counts}" + (f"   [{found}]" if found else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
