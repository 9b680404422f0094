"""Citations in an answer (`knowledge.core.citations`): every chunk id the model wrote is found, in
order and in any wrapping, tied to the sentence it stands beside, and judged against what was shown."""

from __future__ import annotations

import base64
import hashlib

from hypothesis import given
from hypothesis import strategies as st

from knowledge.core.citations import CHUNK_ID, find_citations, judge

WRAPS = ["[{}]", "({})", "【{}】", "<{}>", " {}", "(chunk {})", "[source: {}]"]
words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8)
sentence = st.lists(words, min_size=2, max_size=8).map(lambda ws: " ".join(ws).capitalize())


def an_id(n: int) -> str:
    return "kc_" + base64.b32encode(hashlib.sha256(str(n).encode()).digest()[:13]).decode().rstrip("=").lower()


@given(sentences=st.lists(st.tuples(sentence, st.lists(st.integers(0, 50), max_size=3),
                                    st.sampled_from(WRAPS), st.sampled_from([". ", ".\n", "! ", "? "])),
                          min_size=1, max_size=6))
def test_every_citation_is_found_in_order_with_the_sentence_it_stands_in(
        sentences: list[tuple[str, list[int], str, str]]) -> None:
    answer, expected = "", []
    for text, ids, wrap, end in sentences:
        cited = "".join(wrap.format(an_id(i)) for i in ids)
        answer += f"{text}{cited}{end}"
        expected += [(an_id(i), text + end.strip()) for i in ids]
    found = find_citations(answer)
    assert [(c.chunk_id, c.claim) for c in found] == expected
    assert all(c.well_formed and answer[c.start:c.end] == c.chunk_id for c in found)


@given(text=sentence, n=st.integers(0, 50))
def test_a_citation_alone_after_its_sentence_belongs_to_it(text: str, n: int) -> None:
    for answer in (f"{text}.\n[{an_id(n)}]\n", f"{text}. [{an_id(n)}] Another one here.", f"{text}. {an_id(n)}"):
        assert [(c.chunk_id, c.claim) for c in find_citations(answer)] == [(an_id(n), f"{text}.")]


def test_an_invented_or_garbled_id_is_a_citation_and_hallucinated() -> None:
    shown = {an_id(1), an_id(2)}
    answer = (f"Etcd elects a leader [{an_id(1)}]. Snapshots compact the log [{an_id(3)}]. "
              f"Defrag frees space [kc_notarealid, {an_id(2)}]. An id in a word like xkc_abc is not one.")
    judged = judge(answer, shown)
    assert [(j.citation.chunk_id, j.shown, j.citation.well_formed) for j in judged] == [
        (an_id(1), True, True), (an_id(3), False, True), ("kc_notarealid", False, False), (an_id(2), True, True)]
    assert [j.citation.claim for j in judged] == ["Etcd elects a leader.", "Snapshots compact the log.",
                                                  "Defrag frees space.", "Defrag frees space."]
    assert CHUNK_ID.match(an_id(7)) and not find_citations("No citation at all.")
