"""knowledge.core.relevance: the features, the calibrated model, and the floor it drives."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowledge.core import relevance_models
from knowledge.core.ranking import KNOWLEDGE_V2, rank, select
from knowledge.core.relevance import (
    CLIP,
    LEXICAL_FEATURES,
    SEMANTIC_FEATURES,
    LexicalEvidence,
    Match,
    RelevanceModel,
    features,
    proximity,
)
from tests.core.test_ranking import TODAY, cand

IDF = {"snapshot": 2.0, "restor": 3.0, "etcd": 1.0}


def evidence(**matches: list[Match]) -> LexicalEvidence:
    return LexicalEvidence(idf=dict(IDF), avgdl=100.0, lengths={c: 100 for c in matches}, matches=dict(matches))


def test_proximity_is_the_idf_share_of_the_terms_found_together() -> None:
    near = [Match("snapshot", (10,), False), Match("restor", (12,), False), Match("etcd", (90,), False)]
    assert proximity(near, IDF) == pytest.approx(5 / 6)
    apart = [Match("snapshot", (10,), False), Match("restor", (40,), False), Match("etcd", (90,), False)]
    assert proximity(apart, IDF) == pytest.approx(3 / 6)
    assert proximity([], IDF) == 0.0
    assert proximity(near, {}) == 0.0


def test_features_measure_coverage_heading_and_gaps() -> None:
    ev = evidence(
        a=[Match("snapshot", (1, 20), True), Match("restor", (2, 21), True), Match("etcd", (30,), False)],
        b=[Match("etcd", (5,), False)],
    )
    f = features(["a", "b", "c"], ev, documents={"a": 1, "b": 2, "c": 2})
    assert f["a"]["coverage"] == pytest.approx(1.0) and f["a"]["heading"] == pytest.approx(5 / 6)
    assert f["b"]["coverage"] == pytest.approx(1 / 6) and f["b"]["heading"] == 0.0
    assert f["c"]["coverage"] == 0.0 and f["c"]["bm25"] == 0.0
    assert f["a"]["bm25"] > f["b"]["bm25"] > 0 and f["a"]["bm25_gap"] == 0.0 and f["b"]["bm25_gap"] > 0
    # Document features: the best of its document's candidates, and its share of them.
    assert f["c"]["doc_bm25"] == f["b"]["bm25"] and f["c"]["doc_coverage"] == f["b"]["coverage"]
    assert set(f["a"]) == set(LEXICAL_FEATURES)
    g = features(["a", "b"], ev, documents={"a": 1, "b": 1}, cosines={"a": 0.3, "b": 0.7})
    assert set(g["a"]) == set(LEXICAL_FEATURES + SEMANTIC_FEATURES)
    assert g["a"]["cosine_gap"] == pytest.approx(0.4) and g["a"]["doc_cosine"] == 0.7


@pytest.mark.parametrize("model", [relevance_models.LEXICAL, relevance_models.FUSED], ids=lambda m: m.name)
def test_the_shipped_models_prefer_more_evidence(model: RelevanceModel) -> None:
    """More of the query found, found in the heading and found together: never less relevant."""
    base = {name: 0.0 for name in model.features} | {"bm25_gap": 0.6, "coverage_gap": 1.0}
    strong = base | {"bm25": 0.6, "coverage": 1.0, "heading": 0.5, "proximity": 1.0, "bm25_gap": 0.0,
                     "coverage_gap": 0.0, "doc_bm25": 0.6, "doc_coverage": 1.0}
    if "cosine" in model.features:
        base |= {"cosine_gap": 0.7}
        strong |= {"cosine": 0.7, "doc_cosine": 0.7}
    assert 0.0 <= model.relevance(base) < model.relevance(strong) <= 1.0
    assert model.relevance(strong) > relevance_models.MIN_RELEVANCE > model.relevance(base)


@given(st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=len(LEXICAL_FEATURES + SEMANTIC_FEATURES),
                max_size=len(LEXICAL_FEATURES + SEMANTIC_FEATURES)))
def test_relevance_is_a_probability_whatever_the_features(values: list[float]) -> None:
    x = dict(zip(LEXICAL_FEATURES + SEMANTIC_FEATURES, values, strict=True))
    for model in (relevance_models.LEXICAL, relevance_models.FUSED):
        assert 0.0 <= model.relevance(x) <= 1.0


def test_a_model_needs_one_weight_mean_and_scale_per_feature() -> None:
    with pytest.raises(ValueError):
        RelevanceModel("m", ("a", "b"), (1.0,), 0.0, (0.0, 0.0), (1.0, 1.0))
    with pytest.raises(ValueError):
        RelevanceModel("m", ("a",), (1.0,), 0.0, (0.0,), (0.0,))


def test_relevance_orders_the_passages_and_the_floor_drops_the_weak() -> None:
    cands = [cand("weak", arm_ranks={"lexical": 1}), cand("strong", arm_ranks={"lexical": 2}),
             cand("none", arm_ranks={"lexical": 3})]
    relevances = {"weak": 0.2, "strong": 0.9, "none": 0.01}
    ranked = rank(cands, current_scope=None, today=TODAY, n_arms=1, policy=KNOWLEDGE_V2, relevances=relevances)
    assert [p.chunk_id for p in ranked] == ["strong", "weak", "none"]
    assert [p.relevance for p in ranked] == [0.9, 0.2, 0.01]
    kept = select(ranked, min_score=-1.0, max_passages=3, max_per_document=3, budget_tokens=10_000,
                  min_relevance=0.1, min_relevance_more=0.1)
    assert [p.chunk_id for p in kept] == ["strong", "weak"]
    # The passages after the first meet their own floor; the first only the lower one.
    kept = select(ranked, min_score=-1.0, max_passages=3, max_per_document=3, budget_tokens=10_000,
                  min_relevance=0.005, min_relevance_more=0.5)
    assert [p.chunk_id for p in kept] == ["strong"]
    kept = select(ranked[1:], min_score=-1.0, max_passages=3, max_per_document=3, budget_tokens=10_000,
                  min_relevance=0.005, min_relevance_more=0.5)
    assert [p.chunk_id for p in kept] == ["weak"]
    assert select(ranked, min_score=-1.0, max_passages=3, max_per_document=3, budget_tokens=10_000,
                  min_relevance=0.95) == []
    # A lower floor after the first (the shipped one): the first floor only decides whether a
    # search returns anything.
    kept = select(ranked, min_score=-1.0, max_passages=3, max_per_document=3, budget_tokens=10_000,
                  min_relevance=0.5, min_relevance_more=0.005)
    assert [p.chunk_id for p in kept] == ["strong", "weak", "none"]
    assert select(ranked[1:], min_score=-1.0, max_passages=3, max_per_document=3, budget_tokens=10_000,
                  min_relevance=0.5, min_relevance_more=0.005) == []


def test_the_policy_judges_with_the_fused_model_only_given_cosines() -> None:
    lexical = {name: 0.5 for name in LEXICAL_FEATURES}
    fused = lexical | {name: 0.5 for name in SEMANTIC_FEATURES}
    judged = KNOWLEDGE_V2.judge({"l": lexical, "f": fused})
    assert judged["l"] == relevance_models.LEXICAL.relevance(lexical)
    assert judged["f"] == relevance_models.FUSED.relevance(fused)


def test_a_candidate_without_a_vector_yet_is_judged_by_the_lexical_model() -> None:
    """While its chunk set waits for the embedder, a candidate has no cosine: it must be judged on
    its lexical evidence (as if the arm were off), not as a passage the model found unrelated."""
    ev = evidence(a=[Match("snapshot", (1,), False)], b=[Match("snapshot", (3,), False), Match("restor", (4,), False)])
    mixed = features(["a", "b"], ev, documents={"a": 1, "b": 1}, cosines={"a": 0.6})
    alone = features(["a", "b"], ev, documents={"a": 1, "b": 1})
    assert set(mixed["a"]) == set(LEXICAL_FEATURES + SEMANTIC_FEATURES) and mixed["a"]["cosine_gap"] == 0.0
    assert mixed["b"] == alone["b"]  # the lexical features only, as with the arm off
    judged = KNOWLEDGE_V2.judge(mixed)
    assert judged["b"] == relevance_models.LEXICAL.relevance(alone["b"])
    assert judged["a"] == relevance_models.FUSED.relevance(mixed["a"])


def test_features_far_outside_the_training_range_are_clipped() -> None:
    """A feature hundreds of scales from its mean moves the logit no more than `CLIP` scales do."""
    model = relevance_models.FUSED
    x = {name: mean for name, mean in zip(model.features, model.means, strict=True)}
    at_clip = x | {"bm25": model.means[0] + CLIP * model.scales[0]}
    beyond = x | {"bm25": model.means[0] + 500 * model.scales[0]}
    assert model.logit(beyond) == model.logit(at_clip) != model.logit(x)
