"""The claim-support check (`knowledge.core.support`): a passage's own words are supported, and the
ways a close claim goes wrong — a changed number, a flipped negation, another passage's fact, the
passage's template with its distinctive words swapped — are not."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from knowledge.core.support import (
    LEXICAL_SUPPORT_MODEL,
    SUPPORT_MODEL,
    Passage,
    content_words,
    decide,
    features,
    normalize,
    supported,
)

words = st.sampled_from(["etcd", "cluster", "member", "snapshot", "restore", "leader", "election", "quorum",
                         "compaction", "revision", "client", "certificate", "backup", "defrag", "raft"])
sentence = st.lists(words, min_size=6, max_size=14).map(lambda ws: " ".join(ws).capitalize() + ".")
passage = st.lists(sentence, min_size=1, max_size=5).map(" ".join)

RESTORE = ("To restore a cluster, run etcdutl snapshot restore on every member. The restore takes about 30 "
           "seconds per gigabyte. Clients must not write to the cluster while it is restored.")


@given(text=passage, data=st.data())
def test_a_passages_own_sentence_is_supported_however_it_is_written(text: str, data: st.DataObject) -> None:
    claim = data.draw(st.sampled_from(text.split(". ")))
    assert supported(claim, text)
    assert supported(f"**{claim.upper()}**", text)  # case and emphasis do not matter
    f = features(claim, Passage(text))
    assert f.contained and SUPPORT_MODEL.decide(f)  # containment needs no cosine


@given(text=passage, n=st.integers(0, 9999), m=st.integers(0, 9999), cosine=st.floats(-1.0, 1.0))
def test_a_number_the_passage_does_not_hold_is_unsupported(text: str, n: int, m: int, cosine: float) -> None:
    assume(n != m)
    with_number = f"{text} The limit is {n} requests."
    assert supported(f"The limit is {n} requests.", with_number)
    wrong = features(f"The limit is {m} requests.", with_number)
    assert not wrong.numbers_ok and not LEXICAL_SUPPORT_MODEL.decide(wrong)
    assert not SUPPORT_MODEL.decide(replace(wrong, cosine=cosine))  # however close the embedding says it is


def test_a_flipped_negation_or_another_fact_is_unsupported() -> None:
    assert supported("Clients must not write to the cluster while it is restored.", RESTORE)
    assert not supported("Clients must write to the cluster while it is restored.", RESTORE)
    assert not supported("Run etcdutl snapshot restore on one member only, never on the others.", RESTORE)
    assert not supported("The restore takes about 60 seconds per gigabyte.", RESTORE)
    assert not supported("Enable TLS client certificates before the election.", RESTORE)
    assert supported("Run etcdutl snapshot restore on every member to restore a cluster.", RESTORE)
    assert not features("", RESTORE).contained and normalize("Don't") == "do not"


TEMPLATE = "The rollback step of the alpha guide checks the cluster health before the upgrade starts."
#: The tenant's weights: "rollback", "alpha" and their swaps are distinctive, the rest common there.
WEIGHTS = {"rollback": 0.9, "alpha": 0.95, "quorum": 0.9, "charlie": 0.95, "step": 0.1, "guide": 0.1,
           "checks": 0.1, "cluster": 0.05, "health": 0.2, "before": 0.05, "upgrade": 0.2, "starts": 0.1}


def test_a_template_with_its_distinctive_words_swapped_is_unsupported_when_the_tenant_says_they_are() -> None:
    swapped = "The quorum step of the charlie guide checks the cluster health before the upgrade starts."
    weighted = features(swapped, TEMPLATE, WEIGHTS)
    flat = features(swapped, TEMPLATE)
    assert weighted.novel > 0.7 and weighted.recall < flat.recall  # the kept words weigh little
    assert not LEXICAL_SUPPORT_MODEL.decide(weighted)
    # Common words reworded, the distinctive ones kept: supported.
    reworded = "The rollback step of the alpha guide checks cluster health before an upgrade begins."
    assert LEXICAL_SUPPORT_MODEL.decide(features(reworded, TEMPLATE, WEIGHTS | {"begins": 0.2}))
    assert set(content_words(swapped)) <= set(WEIGHTS)


def test_the_semantic_model_needs_the_cosine_and_follows_it() -> None:
    paraphrase = "The rollback step of the alpha guide verifies the cluster health before the upgrade launches."
    f = features(paraphrase, TEMPLATE, WEIGHTS | {"verifies": 0.6, "launches": 0.6})
    assert f.scored and f.cosine is None
    with pytest.raises(ValueError):
        SUPPORT_MODEL.score(f)
    assert decide(f) == LEXICAL_SUPPORT_MODEL.decide(f)  # no cosine: the lexical verdict
    assert SUPPORT_MODEL.decide(replace(f, cosine=0.98))  # a paraphrase, as the model reads it
    assert not SUPPORT_MODEL.decide(replace(f, cosine=0.6))  # another statement
    assert f.claim == normalize(paraphrase).strip(" .") and f.sentence == normalize(TEMPLATE)


def test_a_claim_saying_the_opposite_or_another_unit_is_unsupported_however_close() -> None:
    compaction = "Compaction discards revisions older than the retention window."
    for claim in ("Compaction discards revisions newer than the retention window.",
                  "The restore takes about 30 minutes per gigabyte."):
        f = features(claim, f"{compaction} {RESTORE}")
        assert not f.contrast_free and not f.scored
        assert not SUPPORT_MODEL.decide(replace(f, cosine=1.0))
    assert features("The restore takes about 30 seconds for every gigabyte.", RESTORE).contrast_free
