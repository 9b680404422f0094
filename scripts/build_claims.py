"""A labelled set of claim/passage pairs for the claim-support check (`knowledge.core.support`),
built from the docs corpora: is the claim supported by the passage it cites?

    .venv/bin/python scripts/build_claims.py [--out claims.jsonl] [--seed 31]

Passages are the shipped chunker's chunks of every docs file. From each, up to two prose sentences
(8-40 words, not code, tables, lists or headings) make the claims:

- supported: ``verbatim`` (the sentence), ``trimmed`` (a leading clause dropped, or the sentence
  cut at a comma, and its case changed), ``paraphrase`` (rule-based rewording: synonyms, "you can"
  forms, articles dropped);
- unsupported: ``near_miss`` (a sentence of another chunk of the same document — same topic, same
  words, other facts; any that this passage also says, contained or with every content word in one
  of its sentences, are left out), ``swapped`` (the sentence with its one or two most distinctive
  words — fewest chunks of the corpus hold them — replaced by distinctive words of another chunk of
  the same document: the passage's template, another fact), ``negation`` (a "not" added after the
  first auxiliary, or removed), ``wrong_number`` (a number changed).

Each row: ``{id, claim, passage, supported, kind, file, part}`` where ``part`` is ``fit`` or
``check``, by file (a hash of its path: 70% / 30%), so that the check part's documents are unseen
when fitting. Rule-made paraphrases are easier than a person's: the check part measures the rules
on the kinds of error an agent makes, not a person's rewording.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from retrieval_data import CORPUS, docs_files

from knowledge.core.prepare import prepare
from knowledge.core.support import Passage, content, content_words, features
from knowledge.errors import IngestRefused

_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_PROSE = re.compile(r"^[A-Z][^|`#>]*[.!?]$")
_AUX = re.compile(r"\b(is|are|can|will|should|must|does|do|was|were|has|have|may)\b")
_NOT = re.compile(r"\b(is|are|can|will|should|must|does|do|was|were|has|have|may) not\b|\bcannot\b|n't\b")
_NUM = re.compile(r"\b\d+\b")
SYNONYMS = {
    "use": "employ", "uses": "employs", "used": "employed", "using": "employing", "run": "execute",
    "runs": "executes", "start": "launch", "starts": "launches", "create": "make", "creates": "makes",
    "remove": "delete", "removes": "deletes", "change": "modify", "changes": "modifies", "show": "display",
    "shows": "displays", "need": "require", "needs": "requires", "allows": "lets", "allow": "let",
    "quickly": "fast", "large": "big", "small": "little", "important": "essential", "default": "standard",
    "configure": "set up", "configured": "set up", "specify": "give", "specified": "given",
    "provides": "offers", "provide": "offer", "supports": "handles", "support": "handle",
    "ensure": "make sure", "ensures": "makes sure", "multiple": "several", "additional": "extra",
}


def sentences(chunk_text: str) -> list[str]:
    body = " ".join(line for line in chunk_text.split("\n")
                    if line.strip() and not line.lstrip().startswith(("#", "|", "-", "*", ">", "```", "    ")))
    out = []
    for s in _SENTENCE.split(body):
        s = s.strip()
        if _PROSE.match(s) and 8 <= len(s.split()) <= 40 and s.count("`") <= 4:
            out.append(s)
    return out


def trimmed(s: str) -> str | None:
    head, comma, tail = s.partition(", ")
    if comma and len(head.split()) <= len(s.split()) // 2 and len(tail.split()) >= 6:
        return tail[0].upper() + tail[1:]
    if comma and len(head.split()) >= 6:
        return head + "."
    return None


def paraphrase(s: str, rng: random.Random) -> str | None:
    words = s.split()
    swaps = [i for i, w in enumerate(words) if w.lower().strip(",.") in SYNONYMS]
    if not swaps:
        return None
    for i in rng.sample(swaps, min(2, len(swaps))):
        bare = words[i].strip(",.")
        repl = SYNONYMS[bare.lower()]
        words[i] = words[i].replace(bare, repl.capitalize() if bare[0].isupper() else repl)
    text = " ".join(words)
    text = re.sub(r"\bYou can\b", "It is possible to", text)
    text = re.sub(r"\b(the|a|an) ", "", text, count=1)
    return text


def negated(s: str) -> str | None:
    if _NOT.search(s):
        return _NOT.sub(lambda m: m.group(1) if m.group(1) else ("can" if m.group(0) == "cannot" else ""), s, count=1)
    m = _AUX.search(s)
    return s[:m.end()] + " not" + s[m.end():] if m else None


def wrong_number(s: str, rng: random.Random) -> str | None:
    found = list(_NUM.finditer(s))
    if not found:
        return None
    m = rng.choice(found)
    n = int(m.group())
    other = n + rng.choice([1, 2, 10]) if n < 1000 else n * 2
    return s[:m.start()] + str(other) + s[m.end():]


def part_of(file: str) -> str:
    return "check" if int(hashlib.sha256(file.encode()).hexdigest()[:8], 16) % 10 < 3 else "fit"


def swapped(s: str, passage: Passage, other_chunks: list[str], df: dict[str, int], rng: random.Random) -> str | None:
    """``s`` with its one or two most distinctive content words (fewest chunks hold them) replaced by
    distinctive words of the other chunks that ``passage`` does not hold."""
    mine = sorted({w for w in content_words(s) if not w.isdigit() and len(w) > 2},
                  key=lambda w: (df.get(content([w])[0], 0), w))
    pool = sorted({w for t in other_chunks for w in content_words(t)
                   if not w.isdigit() and len(w) > 2 and content([w])[0] not in passage.theirs
                   and df.get(content([w])[0], 0) <= 20})
    if not mine or not pool:
        return None
    out = s
    for old in mine[: rng.choice((1, 2))]:
        new = rng.choice(pool)
        out = re.sub(rf"(?i)(?<![A-Za-z0-9]){re.escape(old)}(?![A-Za-z0-9])",
                     lambda m, new=new: new.capitalize() if m.group()[0].isupper() else new, out)
    return out if out != s else None


def build(root: Path = CORPUS, seed: int = 31) -> Iterator[dict[str, Any]]:
    rng = random.Random(seed)
    files: list[tuple[str, list[str]]] = []
    for path in docs_files(root):
        file = str(path.relative_to(root))
        try:
            prepared = prepare(path.read_text(encoding="utf-8"), file, "markdown")
        except IngestRefused:
            continue
        files.append((file, [c.draft.text for c in prepared.chunks]))
    df: dict[str, int] = {}
    for _, chunks in files:
        for t in chunks:
            for w in set(content(content_words(t))):
                df[w] = df.get(w, 0) + 1
    for file, chunks in files:
        read = [Passage(t) for t in chunks]
        # Only sentences that are the passage's own words (lines dropped as lists or code can join two).
        per_chunk = [[x for x in sentences(t) if features(x, r).contained] for t, r in zip(chunks, read, strict=True)]
        for i, (passage, mine) in enumerate(zip(chunks, per_chunk, strict=True)):
            others = [s for j, ss in enumerate(per_chunk) if j != i for s in ss]
            other_chunks = [t for j, t in enumerate(chunks) if j != i]
            for s in rng.sample(mine, min(2, len(mine))):
                made: list[tuple[str | None, bool, str]] = [
                    (s, True, "verbatim"), (trimmed(s), True, "trimmed"), (paraphrase(s, rng), True, "paraphrase"),
                    (negated(s), False, "negation"), (wrong_number(s, rng), False, "wrong_number"),
                    (swapped(s, read[i], other_chunks, df, rng), False, "swapped")]
                if others:
                    near = rng.choice(others)
                    f = features(near, read[i])
                    if not f.contained and f.local < 1.0:  # not also said by this passage
                        made.append((near, False, "near_miss"))
                for claim, supported, kind in made:
                    if claim is None or (claim == s and kind != "verbatim"):
                        continue
                    key = f"{file}:{i}:{kind}:{claim}"
                    yield {"id": "c-" + hashlib.sha256(key.encode()).hexdigest()[:10], "claim": claim,
                           "passage": passage, "supported": supported, "kind": kind, "file": file,
                           "part": part_of(file)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("claims.jsonl"))
    parser.add_argument("--seed", type=int, default=31)
    args = parser.parse_args()
    rows = list(build(seed=args.seed))
    with args.out.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    kinds: dict[str, int] = {}
    for r in rows:
        kinds[f"{r['part']}/{r['kind']}"] = kinds.get(f"{r['part']}/{r['kind']}", 0) + 1
    print(f"{len(rows)} pairs -> {args.out}: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))


if __name__ == "__main__":
    main()
