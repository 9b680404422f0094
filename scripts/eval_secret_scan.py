"""Measure the ingest secret scan against its alternative, and the injection scan's flag rate.

    .venv/bin/python scripts/eval_secret_scan.py [--no-alternative]

For `knowledge.core.scan.find_secrets` and for detect-secrets (its default plugins and filters, through its
ordinary file scan): caught / missed / false refusals on the labelled dev set
(shared/corpus/secrets/dev.jsonl.gz), files refused on the Argo CD and etcd docs corpora, and MB/s over
those docs. Then which docs files our scan refuses and why, and how often the injection scan flags the
docs' paragraphs and files. Reads only local files; no network.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from knowledge.core.scan import INJECTION_SCAN_VERSION, SECRET_SCAN_VERSION, find_secrets, is_instruction_like  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus"
DEV_SET = CORPUS / "secrets" / "dev.jsonl.gz"
DOCS = ("docs-argocd", "docs-etcd")

# A scanner answers, for one file on disk and its text, the kinds of credential it found (empty: clean).
Scanner = Callable[[Path, str], list[str]]


def ours(_path: Path, text: str) -> list[str]:
    return [finding.kind for finding in find_secrets(text)]


def detect_secrets_scanner() -> tuple[str, Scanner] | None:
    try:
        from detect_secrets.__version__ import VERSION
        from detect_secrets.core.scan import scan_file
        from detect_secrets.settings import default_settings
    except ImportError:
        return None
    logging.getLogger("detect-secrets").setLevel(logging.CRITICAL)

    def scan(path: Path, _text: str) -> list[str]:
        with default_settings():
            return sorted({secret.type for secret in scan_file(str(path))})

    return f"detect-secrets {VERSION} (default plugins + filters)", scan


def evaluate(scan: Scanner, records: Sequence[dict[str, str]], docs: Sequence[tuple[Path, str]]) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        caught = missed = false = 0
        for record in records:
            path = Path(tmp) / f"{record['id']}.md"  # detect-secrets scans files; ours ignores the path
            path.write_text(record["text"], encoding="utf-8")
            found = bool(scan(path, record["text"]))
            if record["label"] == "secret":
                caught += found
                missed += not found
            else:
                false += found
    size = sum(len(text.encode()) for _, text in docs)
    started = time.perf_counter()
    refused = {path: kinds for path, text in docs if (kinds := scan(path, text))}
    seconds = time.perf_counter() - started
    return {"caught": caught, "missed": missed, "false": false, "refused": refused, "mbps": size / seconds / 1e6}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-alternative", action="store_true", help="skip detect-secrets (about a minute)")
    args = parser.parse_args()
    if not DEV_SET.exists():
        print(f"no corpus at {CORPUS}", file=sys.stderr)
        return 1
    with gzip.open(DEV_SET, "rt", encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh]
    files = sorted(p for name in DOCS for p in (CORPUS / name).rglob("*.md"))
    docs = [(p, p.read_text(encoding="utf-8")) for p in files]
    n_secret = sum(r["label"] == "secret" for r in records)
    n_clean = len(records) - n_secret

    scanners: list[tuple[str, Scanner | None]] = [(f"knowledge.core.scan ({SECRET_SCAN_VERSION}, hand-written)", ours)]
    alternative = None if args.no_alternative else detect_secrets_scanner()
    if args.no_alternative:
        scanners.append(("detect-secrets", None))
    elif alternative is None:
        scanners.append(("detect-secrets (not installed: pip install detect-secrets)", None))
    else:
        scanners.append(alternative)

    print(f"dev set: {n_secret} secret + {n_clean} clean; docs: {len(docs)} Markdown files")
    print(f"{'scanner':58} {'caught':>7} {'missed':>7} {'false':>6} {'docs refused':>13} {'MB/s':>7}")
    results: dict[str, dict[str, object]] = {}
    for name, scan in scanners:
        if scan is None:
            print(f"{name:58} {'—':>7} {'—':>7} {'—':>6} {'—':>13} {'—':>7}")
            continue
        result = results[name] = evaluate(scan, records, docs)
        refused = result["refused"]
        assert isinstance(refused, dict)
        print(
            f"{name:58} {result['caught']:>4}/{n_secret} {result['missed']:>7} {result['false']:>3}/{n_clean}"
            f" {len(refused):>9}/{len(docs)} {result['mbps']:>7.2f}"
        )

    for name, result in results.items():
        refused = result["refused"]
        assert isinstance(refused, dict)
        print(f"\ndocs files refused by {name}:")
        for path, kinds in refused.items():
            where = ""
            if scanners[0][0] == name:
                lines = sorted({f.line for f in find_secrets(path.read_text(encoding="utf-8"))})
                where = f" (line {', '.join(map(str, lines))})"
            print(f"  {path.relative_to(CORPUS)}: {', '.join(kinds)}{where}")

    paragraphs = [p for _, text in docs for p in text.split("\n\n") if p.strip()]
    size = sum(len(text.encode()) for _, text in docs)
    started = time.perf_counter()
    flagged_files = [path for path, text in docs if is_instruction_like(text)]
    mbps = size / (time.perf_counter() - started) / 1e6
    flagged = sum(is_instruction_like(p) for p in paragraphs)
    print(
        f"\ninjection scan ({INJECTION_SCAN_VERSION}): {flagged}/{len(paragraphs)} paragraphs "
        f"({flagged / len(paragraphs):.3%}), {len(flagged_files)}/{len(docs)} files flagged, {mbps:.1f} MB/s"
    )
    for path in flagged_files:
        print(f"  {path.relative_to(CORPUS)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
