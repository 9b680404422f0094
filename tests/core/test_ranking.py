"""knowledge.core.ranking: fusion, each of the four terms, duplicates, caps, the floor and the budget edge."""

from __future__ import annotations

import hashlib
import itertools
import uuid
from dataclasses import replace
from datetime import date, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowledge.core.ranking import (
    KNOWLEDGE_V1,
    Candidate,
    RankingPolicy,
    authority_term,
    boilerplate_share,
    penalty_term,
    rank,
    recency_term,
    rrf,
    score,
    select,
)
from knowledge.models import Authority, RetrievedPassage

TODAY = date(2026, 7, 28)
DOC_A = uuid.UUID(int=1)
DOC_B = uuid.UUID(int=2)
PROSE = (
    "Roll back by reverting the release tag and re-running the deploy job. Do not edit the running "
    "configuration directly, or the next deploy silently undoes it."
)


def cand(chunk_id: str, **kw: Any) -> Candidate:
    """A plain, in-every-way-average candidate; tests change one thing at a time."""
    text = kw.pop("text", f"{PROSE} ({chunk_id})")
    fields: dict[str, Any] = {
        "chunk_id": chunk_id, "document_id": DOC_A, "version": 1, "title": "Guide", "heading_path": ("Deploy",),
        "text": text, "tokens": 60, "doc_date": None, "authority": Authority.PRINCIPAL_SUPPLIED,
        "project_scope": None, "instruction_like": False,
        "content_sha256": hashlib.sha256(text.encode()).hexdigest(), "arm_ranks": {"lexical": 1}, "strength": 0.5,
    }
    fields.update(kw)
    return Candidate(**fields)


def ranked_ids(cands: list[Candidate], *, scope: str | None = None, n_arms: int = 1) -> list[str]:
    return [p.chunk_id for p in rank(cands, current_scope=scope, today=TODAY, n_arms=n_arms)]


def terms(c: Candidate, *, scope: str | None = None, n_arms: int = 1) -> dict[str, float]:
    return score(c, current_scope=scope, today=TODAY, n_arms=n_arms, policy=KNOWLEDGE_V1)[1]


# --- fusion ---------------------------------------------------------------------------------------


def test_rrf_is_normalised_so_first_everywhere_is_one() -> None:
    assert rrf({"lexical": 1}, 1) == pytest.approx(1.0)
    assert rrf({"lexical": 1, "semantic": 1}, 2) == pytest.approx(1.0)
    assert rrf({"lexical": 1}, 2) == pytest.approx(0.5)  # absent from an arm costs half
    assert rrf({"lexical": 2}, 1) == pytest.approx(61 / 62)
    assert rrf({"lexical": 3}, 1, k=0) == pytest.approx(1 / 3)
    assert rrf({}, 1) == 0.0


@given(ranks=st.dictionaries(st.sampled_from(["lexical", "semantic", "graph"]), st.integers(1, 10_000)),
       k=st.integers(0, 200))
def test_rrf_in_unit_interval_and_decreasing_in_rank(ranks: dict[str, int], k: int) -> None:
    value = rrf(ranks, 3, k)
    assert 0.0 <= value <= 1.0 + 1e-12
    for arm in ranks:
        assert rrf({**ranks, arm: ranks[arm] + 1}, 3, k) < value


def test_rrf_refuses_what_is_not_a_ranking() -> None:
    for ranks, n_arms in [({"lexical": 1}, 0), ({"a": 1, "b": 1}, 1), ({"lexical": 0}, 1)]:
        with pytest.raises(ValueError):
            rrf(ranks, n_arms)


def test_match_term_is_the_fused_rank() -> None:
    assert terms(cand("a", arm_ranks={"lexical": 5}))["match"] == pytest.approx(61 / 65)
    assert terms(cand("a", arm_ranks={"semantic": 1}), n_arms=2)["match"] == pytest.approx(0.5)


# --- authority ------------------------------------------------------------------------------------


def test_authority_is_a_three_step_ladder() -> None:
    assert authority_term(Authority.PRINCIPAL_AUTHORED) == 1.0
    assert authority_term(Authority.PRINCIPAL_SUPPLIED) == 0.5
    assert authority_term(Authority.FETCHED) == 0.0
    # Equal in every other way, the ladder decides, whatever the input order or chunk ids.
    cands = [cand("a", authority=Authority.FETCHED), cand("b", authority=Authority.PRINCIPAL_AUTHORED),
             cand("c", authority=Authority.PRINCIPAL_SUPPLIED)]
    assert ranked_ids(cands) == ["b", "c", "a"]
    assert ranked_ids(cands[::-1]) == ["b", "c", "a"]


# --- scope affinity -------------------------------------------------------------------------------


def test_scope_affinity_ranks_an_in_project_document_first() -> None:
    in_project = cand("z", project_scope="apollo", document_id=DOC_B)
    tenant_wide = cand("a", project_scope=None)
    assert terms(in_project, scope="apollo")["scope"] == 1.0
    assert terms(in_project, scope="gemini")["scope"] == 0.0
    assert terms(tenant_wide, scope=None)["scope"] == 0.0  # no scope matches nothing, not "None == None"
    assert ranked_ids([tenant_wide, in_project], scope="apollo") == ["z", "a"]
    assert ranked_ids([tenant_wide, in_project], scope=None) == ["a", "z"]  # tie: chunk id


@given(scopes=st.lists(st.sampled_from([None, "apollo", "gemini"]), min_size=1, max_size=12),
       current=st.sampled_from([None, "apollo", "gemini", "mercury"]))
def test_scope_affinity_never_admits_nor_removes(scopes: list[str | None], current: str | None) -> None:
    # Admission is SQL's: whatever the current scope, rank() returns exactly the candidates it was
    # given (all distinct here), an out-of-scope project document included.
    cands = [cand(f"c{i}", project_scope=s, arm_ranks={"lexical": i + 1}) for i, s in enumerate(scopes)]
    got = rank(cands, current_scope=current, today=TODAY, n_arms=1)
    assert sorted(p.chunk_id for p in got) == sorted(c.chunk_id for c in cands)
    assert all(a.score >= b.score for a, b in itertools.pairwise(got))


# --- recency --------------------------------------------------------------------------------------


def test_recency_is_half_life_decay_from_the_document_date() -> None:
    half = timedelta(days=KNOWLEDGE_V1.recency_half_life_days)
    assert recency_term(TODAY, TODAY) == 1.0
    assert recency_term(TODAY - half, TODAY) == pytest.approx(0.5)
    assert recency_term(TODAY - 2 * half, TODAY) == pytest.approx(0.25)
    assert recency_term(TODAY + timedelta(days=400), TODAY) == 1.0  # dated ahead is not fresher than fresh
    assert recency_term(None, TODAY) == KNOWLEDGE_V1.recency_undated == 0.5


def test_recency_reads_doc_date_and_nothing_else() -> None:
    # The newer edition wins on its own date; the version number, chunk id and input order (a
    # stand-in for ingestion order) carry no recency.
    old_edition = cand("a", doc_date=date(2015, 1, 1), version=7)
    new_edition = cand("b", doc_date=date(2026, 6, 1), version=1)
    assert ranked_ids([old_edition, new_edition]) == ["b", "a"]
    assert ranked_ids([new_edition, old_edition]) == ["b", "a"]
    for c in (old_edition, new_edition):
        assert terms(c)["recency"] == recency_term(c.doc_date, TODAY)
        assert terms(replace(c, version=99, chunk_id="x", tokens=500))["recency"] == terms(c)["recency"]


def test_recency_breaks_a_one_place_tie() -> None:
    # The search gate's case: the new edition's slightly longer text ranks it second lexically.
    old = cand("a", doc_date=date(2015, 1, 1), arm_ranks={"lexical": 1})
    new = cand("b", doc_date=date(2026, 6, 1), arm_ranks={"lexical": 2})
    assert ranked_ids([old, new]) == ["b", "a"]


# --- penalty --------------------------------------------------------------------------------------

LINK_LIST = "## See also\n\n- [Install](install.md)\n- [Upgrade](upgrade.md)\n- <https://example.com/faq>\n"
TOC = "Contents\n\n1. Introduction ........ 3\n2. Deployment ........ 7\n3. Rollback ........ 12\n"
LICENSE = (
    "Permission is hereby granted, free of charge, to any person obtaining a copy of this software.\n"
    'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED.\n'
)
REFDEFS_ONLY = "[grpc]: https://www.grpc.io\n[raft]: https://raft.github.io/raft.pdf\n[tuning]: ../tuning/\n"
NAV = "Skip to content\nHome | Docs | Blog | About\nDocs › Guides › Deploy\n« Previous\nNext »\n"


@pytest.mark.parametrize("text", [LINK_LIST, TOC, LICENSE, NAV, REFDEFS_ONLY],
                         ids=["links", "toc", "license", "nav", "refdefs-only"])
def test_boilerplate_is_penalised_and_ranks_below_content(text: str) -> None:
    boiler = cand("a", text=text)
    assert terms(boiler)["penalty"] == 1.0
    assert ranked_ids([boiler, cand("b")]) == ["b", "a"]


@pytest.mark.parametrize("text", [
    PROSE,
    "## Tables\n\nName | Type | Default\n--- | --- | ---\nport | int | 5432\nhost | str | localhost\n",
    "```sh\ncat log | grep error | sort | uniq -c\ncurl https://example.com/api\n```\n",
    "See [the rollback guide](rollback.md) before you revert a release tag in production.\n",
    "Modes are read|write|admin, and the default is read.\n",
    f"{PROSE} See [the guide][guide] and [tuning][].\n\n" + REFDEFS_ONLY + "[guide]: ../guide/\n",
], ids=["prose", "table", "code", "link-in-prose", "pipes-in-prose", "prose-with-refdefs"])
def test_content_is_not_boilerplate(text: str) -> None:
    assert boilerplate_share(text) == 0.0
    assert penalty_term(cand("a", text=text)) == 0.0


def test_tiny_chunk_penalty_is_linear_below_the_threshold() -> None:
    threshold = KNOWLEDGE_V1.tiny_chunk_tokens
    assert penalty_term(cand("a", tokens=0)) == 1.0
    assert penalty_term(cand("a", tokens=threshold // 2)) == pytest.approx(0.5)
    assert penalty_term(cand("a", tokens=threshold)) == 0.0
    assert ranked_ids([cand("a", tokens=2), cand("b", tokens=200)]) == ["b", "a"]


def test_penalty_demotes_but_a_much_better_match_survives_it() -> None:
    # w_penalty is worth ~20 places at the top of an arm: boilerplate first in the arm still beats
    # content fiftieth, but not content fifth.
    boiler = cand("a", text=NAV, arm_ranks={"lexical": 1})
    assert ranked_ids([boiler, cand("b", arm_ranks={"lexical": 5})]) == ["b", "a"]
    assert ranked_ids([boiler, cand("b", arm_ranks={"lexical": 50})]) == ["a", "b"]


# --- the terms together: match dominates ----------------------------------------------------------


def test_match_dominates_and_the_other_terms_break_near_ties() -> None:
    def strong_but_disadvantaged(r: int) -> Candidate:
        return cand("s", authority=Authority.FETCHED, doc_date=date(2010, 1, 1), project_scope="other",
                    arm_ranks={"lexical": r})

    def weak_but_favoured(r: int) -> Candidate:
        return cand("w", authority=Authority.PRINCIPAL_AUTHORED, doc_date=TODAY, project_scope="apollo",
                    document_id=DOC_B, arm_ranks={"lexical": r})

    # Near-tie (adjacent places): authority, scope and recency decide.
    assert ranked_ids([strong_but_disadvantaged(1), weak_but_favoured(2)], scope="apollo")[0] == "w"
    # A large gap: relevance decides, whatever the document terms say.
    assert ranked_ids([strong_but_disadvantaged(1), weak_but_favoured(12)], scope="apollo")[0] == "s"
    # Found by both of two arms beats found by one, always.
    both = replace(strong_but_disadvantaged(1), arm_ranks={"lexical": 30, "semantic": 30})
    assert ranked_ids([both, weak_but_favoured(1)], scope="apollo", n_arms=2)[0] == "s"


def test_policy_weights_keep_match_dominant() -> None:
    p = KNOWLEDGE_V1
    assert p.name == "knowledge-v1" and p.rrf_k == 60
    assert p.w_authority + p.w_scope + p.w_recency <= 0.1 * p.w_match + 1e-12
    with pytest.raises(ValueError):
        RankingPolicy(w_scope=-1.0)
    with pytest.raises(ValueError):
        RankingPolicy(recency_half_life_days=0)


# --- rank -----------------------------------------------------------------------------------------


def test_exact_duplicates_are_dropped_keeping_the_higher_ranked() -> None:
    text = "The quorum rule: a majority of members must agree before a write commits."
    in_project = cand("z", text=text, project_scope="apollo", document_id=DOC_B)
    tenant_wide = cand("a", text=text)
    other = cand("m")
    assert ranked_ids([tenant_wide, in_project, other], scope="apollo") == ["z", "m"]
    assert ranked_ids([tenant_wide, in_project, other], scope=None) == ["a", "m"]  # same count, other copy


def test_rank_builds_passages_and_breaks_ties_by_chunk_id() -> None:
    c = cand("kc_b", arm_ranks={"semantic": 3, "lexical": 1}, instruction_like=True, tokens=77,
             doc_date=date(2026, 5, 2), heading_path=("Deployment", "Rollback"))
    (p,) = rank([c], current_scope=None, today=TODAY, n_arms=2)
    assert p.chunk_id == "kc_b" and p.document_id == c.document_id and p.title == c.title
    assert p.heading_path == ["Deployment", "Rollback"] and p.text == c.text and p.doc_date == c.doc_date
    assert p.arms == ["lexical", "semantic"] and p.instruction_like and p.tokens == 77
    assert p.authority is c.authority
    assert p.score == score(c, current_scope=None, today=TODAY, n_arms=2, policy=KNOWLEDGE_V1)[0]
    assert ranked_ids([cand("kc_c"), cand("kc_a"), cand("kc_b")]) == ["kc_a", "kc_b", "kc_c"]


@given(st.permutations(list(range(8))))
def test_rank_is_independent_of_input_order(order: list[int]) -> None:
    cands = [cand(f"c{i}", arm_ranks={"lexical": 1 + i // 2}, authority=list(Authority)[i % 3]) for i in range(8)]
    assert ranked_ids([cands[i] for i in order]) == ranked_ids(cands)


# --- select ---------------------------------------------------------------------------------------


def passage(chunk_id: str, *, score: float = 1.0, tokens: int = 100, document_id: uuid.UUID = DOC_A,
            text: str | None = None) -> RetrievedPassage:
    return RetrievedPassage(
        chunk_id=chunk_id, document_id=document_id, title="Guide", heading_path=["Deploy"],
        text=text if text is not None else f"{PROSE} {chunk_id}", doc_date=None,
        authority=Authority.PRINCIPAL_SUPPLIED, score=score, arms=["lexical"], instruction_like=False, tokens=tokens,
    )


def pick(ps: list[RetrievedPassage], **kw: Any) -> list[str]:
    args: dict[str, Any] = {"min_score": 0.0, "max_passages": 3, "max_per_document": 2, "budget_tokens": 3000}
    args.update(kw)
    return [p.chunk_id for p in select(ps, **args)]


def test_budget_edge_drops_the_third_passage_whole() -> None:
    ps = [passage("a", tokens=1000, document_id=DOC_A), passage("b", tokens=1000, document_id=DOC_B),
          passage("c", tokens=1000, document_id=uuid.UUID(int=3))]
    got = select(ps, min_score=0.0, max_passages=3, max_per_document=2, budget_tokens=2999)
    assert [p.chunk_id for p in got] == ["a", "b"]  # exactly two
    assert [p.text for p in got] == [ps[0].text, ps[1].text]  # none truncated
    assert pick(ps, budget_tokens=3000) == ["a", "b", "c"]


def test_the_first_passage_that_does_not_fit_ends_the_selection() -> None:
    ps = [passage("a", tokens=500), passage("b", tokens=2000, document_id=DOC_B),
          passage("c", tokens=10, document_id=uuid.UUID(int=3))]
    assert pick(ps, budget_tokens=1000) == ["a"]  # "c" would fit, but is not slipped in past "b"
    assert pick(ps, budget_tokens=499) == []


def test_per_document_cap() -> None:
    ps = [passage("a1"), passage("a2"), passage("a3"), passage("b1", document_id=DOC_B)]
    assert pick(ps) == ["a1", "a2", "b1"]
    assert pick(ps, max_per_document=1) == ["a1", "b1"]


def test_max_passages() -> None:
    ps = [passage(f"p{i}", document_id=uuid.UUID(int=i)) for i in range(5)]
    assert pick(ps) == ["p0", "p1", "p2"]
    assert pick(ps, max_passages=0) == []


def test_relevance_floor_on_score_and_on_evidence_strength() -> None:
    ps = [passage("a", score=0.9), passage("b", score=0.2, document_id=DOC_B),
          passage("c", score=0.8, document_id=uuid.UUID(int=3))]
    assert pick(ps, min_score=0.5) == ["a", "c"]
    strengths = {"a": 0.01, "b": 0.9, "c": 0.3}
    assert pick(ps, strengths=strengths, min_strength=0.05) == ["b", "c"]
    assert pick(ps, strengths={"c": 0.3}, min_strength=0.05) == ["c"]  # no recorded evidence is none
    assert pick(ps, strengths=strengths) == ["a", "b", "c"]  # default min_strength admits all


@given(
    specs=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1500), st.floats(-1, 2)), max_size=12),
    budget=st.integers(0, 4000), max_passages=st.integers(0, 5), cap=st.integers(1, 3),
    min_score=st.floats(-1, 2),
)
def test_select_properties(specs: list[tuple[int, int, float]], budget: int, max_passages: int, cap: int,
                           min_score: float) -> None:
    ps = [passage(f"p{i}", document_id=uuid.UUID(int=d), tokens=t, score=s) for i, (d, t, s) in enumerate(specs)]
    got = select(ps, min_score=min_score, max_passages=max_passages, max_per_document=cap, budget_tokens=budget)
    positions = [ps.index(p) for p in got]
    assert positions == sorted(positions)  # rank order kept, nothing invented
    assert len(got) <= max_passages and sum(p.tokens for p in got) <= budget
    assert all(p.score >= min_score for p in got)
    assert all(sum(q.document_id == p.document_id for q in got) <= cap for p in got)
    assert all(p == ps[i] for p, i in zip(got, positions, strict=True))  # whole, unchanged
