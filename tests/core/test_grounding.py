"""An answer's grounding (`knowledge.core.grounding`), as a property over generated answers: a
citation of the passage that holds its sentence is supported, of another shown passage or of an id
the turn never showed is not, and the passages an answer drew on are exactly those whose sentences
it uses, cited or not."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from knowledge.core.citations import judge
from knowledge.core.grounding import AnswerCheck, Grounding

#: Three passages with disjoint vocabularies, so a sentence is supported by its own passage only.
POOLS = {
    "kc_aaaaaaaaaaaaaaaaaaaaa": ["etcd", "snapshot", "restore", "member", "quorum", "raft", "leader", "revision"],
    "kc_bbbbbbbbbbbbbbbbbbbbb": ["argocd", "password", "account", "token", "session", "login", "admin", "secret"],
    "kc_ccccccccccccccccccccc": ["compaction", "defrag", "backend", "freelist", "page", "database", "space", "file"],
}
MADE_UP = "kc_zzzzzzzzzzzzzzzzzzzzz"


@st.composite
def passages(draw: st.DrawFn) -> dict[str, list[str]]:
    return {cid: [" ".join(draw(st.lists(st.sampled_from(pool), min_size=5, max_size=9, unique=True))).capitalize()
                  + "." for _ in range(draw(st.integers(1, 3)))] for cid, pool in POOLS.items()}


# Each answer sentence: (passage it comes from, how it is cited: its own id, another shown id,
# an id never shown, or none).
uses = st.lists(st.tuples(st.sampled_from(sorted(POOLS)), st.sampled_from(["own", "other", "made_up", "none"]),
                          st.integers(0, 2)), min_size=1, max_size=6)


def check(answer: str, texts: dict[str, str]) -> Grounding:
    judged = judge(answer, texts.keys())
    run = AnswerCheck(answer, judged, texts, weights={})
    for _ in run.steps():
        pass
    return run.result()


@given(sentences=passages(), plan=uses)
def test_citations_are_supported_by_their_own_passage_only_and_drawing_is_found_cited_or_not(
        sentences: dict[str, list[str]], plan: list[tuple[str, str, int]]) -> None:
    texts = {cid: " ".join(ss) for cid, ss in sentences.items()}
    parts, expected, used = [], [], set()
    for cid, how, k in plan:
        sentence = sentences[cid][k % len(sentences[cid])]
        used.add(cid)
        cited = {"own": cid, "other": next(c for c in sorted(POOLS) if c != cid), "made_up": MADE_UP}.get(how)
        parts.append(f"{sentence[:-1]} [{cited}]." if cited else sentence)
        if cited:
            expected.append((cited, cited != MADE_UP, how == "own"))
    grounding = check(" ".join(parts), texts)
    assert [(c.citation.chunk_id, c.shown, c.supported) for c in grounding.citations] == expected
    assert grounding.drawn_on == used
    assert grounding.cited == {c for c, shown, _ in expected if shown}
    assert grounding.cites_what_it_drew_on == (used <= grounding.cited)
    assert grounding.supported + grounding.unsupported == len(expected)


def test_a_citation_of_a_passage_no_longer_stored_has_no_verdict() -> None:
    answer = "Restore the snapshot on every member [kc_aaaaaaaaaaaaaaaaaaaaa]."
    judged = judge(answer, {"kc_aaaaaaaaaaaaaaaaaaaaa"})  # shown by the turn, since deleted: no text
    run = AnswerCheck(answer, judged, {}, weights={})
    assert list(run.steps()) == [] and run.semantic_pairs() == []
    grounding = run.result()
    assert [c.supported for c in grounding.citations] == [None] and grounding.drawn_on == frozenset()
