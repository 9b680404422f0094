"""The claim-support check (`knowledge.core.support`): a passage's own words are supported, and the
ways a close claim goes wrong — a changed number, a flipped negation, another passage's fact — are not."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from knowledge.core.support import SUPPORT_MODEL, features, normalize

words = st.sampled_from(["etcd", "cluster", "member", "snapshot", "restore", "leader", "election", "quorum",
                         "compaction", "revision", "client", "certificate", "backup", "defrag", "raft"])
sentence = st.lists(words, min_size=6, max_size=14).map(lambda ws: " ".join(ws).capitalize() + ".")
passage = st.lists(sentence, min_size=1, max_size=5).map(" ".join)

RESTORE = ("To restore a cluster, run etcdutl snapshot restore on every member. The restore takes about 30 "
           "seconds per gigabyte. Clients must not write to the cluster while it is restored.")


@given(text=passage, data=st.data())
def test_a_passages_own_sentence_is_supported_however_it_is_written(text: str, data: st.DataObject) -> None:
    claim = data.draw(st.sampled_from(text.split(". ")))
    assert SUPPORT_MODEL.supported(claim, text)
    assert SUPPORT_MODEL.supported(f"**{claim.upper()}**", text)  # case and emphasis do not matter


@given(text=passage, n=st.integers(0, 9999), m=st.integers(0, 9999))
def test_a_number_the_passage_does_not_hold_is_unsupported(text: str, n: int, m: int) -> None:
    assume(n != m)
    with_number = f"{text} The limit is {n} requests."
    assert SUPPORT_MODEL.supported(f"The limit is {n} requests.", with_number)
    assert not SUPPORT_MODEL.supported(f"The limit is {m} requests.", with_number)


def test_a_flipped_negation_or_another_fact_is_unsupported() -> None:
    assert SUPPORT_MODEL.supported("Clients must not write to the cluster while it is restored.", RESTORE)
    assert not SUPPORT_MODEL.supported("Clients must write to the cluster while it is restored.", RESTORE)
    assert not SUPPORT_MODEL.supported("Run etcdutl snapshot restore on one member only, never on the others.",
                                       RESTORE)
    assert not SUPPORT_MODEL.supported("The restore takes about 60 seconds per gigabyte.", RESTORE)
    assert not SUPPORT_MODEL.supported("Enable TLS client certificates before the election.", RESTORE)
    assert SUPPORT_MODEL.supported("Run etcdutl snapshot restore on every member to restore a cluster.", RESTORE)
    assert not features("", RESTORE).contained and normalize("Don't") == "do not"
