"""Region B budget: the classes as data, the yield order, whole passages. Pure, property-tested. The gate
is `tests/gates/test_budget_yield.py`."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge.core.budget import (
    IN_TURN_RECALL,
    KNOWLEDGE,
    REGION_B,
    BudgetClass,
    PressureTally,
    allocate,
    allocate_turn,
)
from knowledge.core.memory_boundary import Belief
from knowledge.models import Authority, RetrievedPassage

DOC = uuid.UUID(int=7)


def beliefs(tokens: Sequence[int]) -> list[Belief]:
    return [Belief(belief_id=f"b{i}", text=f"belief {i}", tokens=t) for i, t in enumerate(tokens)]


def passages(tokens: Sequence[int]) -> list[RetrievedPassage]:
    return [
        RetrievedPassage(chunk_id=f"kc_{i:021d}", document_id=DOC, title="Guide", heading_path=["Guide", f"S{i}"],
                         text=" ".join(["word"] * t), doc_date=None, authority=Authority.PRINCIPAL_SUPPLIED,
                         score=1.0 - i / 100, arms=["lexical"], instruction_like=False, tokens=t)
        for i, t in enumerate(tokens)
    ]


def test_the_classes_are_the_spec_rows() -> None:
    assert (KNOWLEDGE.max_items, KNOWLEDGE.max_tokens) == (3, 3000)
    assert (IN_TURN_RECALL.max_items, IN_TURN_RECALL.max_tokens) == (None, 2000)
    assert KNOWLEDGE.yield_order < IN_TURN_RECALL.yield_order  # knowledge yields first
    assert [c.name for c in sorted(REGION_B, key=lambda c: c.yield_order)] == ["knowledge", "in_turn_recall"]


def test_knowledge_drops_its_third_passage_whole_when_the_region_is_short() -> None:
    # Ten 100-token beliefs and three 900-token passages in a 3,500-token region: 3,700 requested.
    got = allocate_turn(3500, beliefs([100] * 10), passages([900, 900, 900]))
    assert len(got.beliefs) == 10 and [p.chunk_id for p in got.passages] == [p.chunk_id for p in passages([0] * 2)]
    assert (got.knowledge.admitted, got.knowledge.rendered, got.knowledge.yielded_items) == (3, 2, 1)
    assert got.knowledge.yielded_tokens == 900 and got.allocation.used_tokens == 2800
    assert got.recall.yielded_items == 0


def test_in_turn_recall_yields_only_once_knowledge_has_nothing_left() -> None:
    got = allocate_turn(800, beliefs([100] * 10), passages([500]))
    assert got.passages == () and got.knowledge.yielded_items == 1
    assert [b.belief_id for b in got.beliefs] == [f"b{i}" for i in range(8)]
    assert got.recall.yielded_items == 2 and got.allocation.used_tokens == 800


def test_the_class_allowance_is_not_pressure() -> None:
    # Four passages offered, 1,200 tokens each: the class admits two (3,000 tokens), nothing yields.
    got = allocate_turn(100_000, [], passages([1200, 1200, 1200, 1200]))
    assert (got.knowledge.offered, got.knowledge.admitted, got.knowledge.rendered) == (4, 2, 2)
    assert not got.allocation.under_pressure
    # A passage that does not fit ends the class: the smaller one after it is not slipped in.
    got = allocate_turn(100_000, [], passages([2500, 900, 100]))
    assert got.knowledge.admitted == 1


@settings(max_examples=500, deadline=None)
@given(region=st.integers(0, 3000), demands=st.lists(st.lists(st.integers(0, 400), max_size=8), min_size=3,
                                                     max_size=3))
def test_classes_yield_strictly_in_their_order(region: int, demands: list[list[int]]) -> None:
    classes = (BudgetClass("c", 2000, None, yield_order=2), BudgetClass("a", 2000, 4, yield_order=0),
               BudgetClass("b", 2000, None, yield_order=1))
    got = allocate(region, dict(zip("abc", demands, strict=True)), classes)
    order = ["a", "b", "c"]
    for i, name in enumerate(order):
        if got[name].yielded:  # its next item would not fit even if every earlier class rendered nothing
            later = sum(got[n].tokens for n in order[i:])
            assert later + demands[i][got[name].rendered] > region
    assert got.used_tokens <= region


def test_allocate_refuses_what_it_cannot_mean() -> None:
    with pytest.raises(ValueError, match="unknown"):
        allocate(100, {"nonsense": [1]})
    with pytest.raises(ValueError, match="non-negative"):
        allocate(-1, {})
    with pytest.raises(ValueError, match="distinct"):
        allocate(100, {}, (KNOWLEDGE, BudgetClass("other", 10, None, yield_order=KNOWLEDGE.yield_order)))
    with pytest.raises(ValueError, match="non-negative"):
        allocate(100, {"knowledge": [-5]})


def test_pressure_tally_counts_how_often_and_how_much() -> None:
    tally = PressureTally()
    tally.add(allocate_turn(10_000, beliefs([100]), passages([900, 900])).allocation)  # no pressure
    tally.add(allocate_turn(1000, beliefs([100] * 5), passages([400, 400])).allocation)  # yields one (400)
    tally.add(allocate_turn(1000, beliefs([100]), []).allocation)  # nothing to render: cannot yield
    assert (tally.turns, tally.turns_with_candidates, tally.yielded_turns) == (3, 2, 1)
    assert (tally.admitted_items, tally.rendered_items, tally.yielded_items, tally.yielded_tokens) == (4, 3, 1, 400)
    assert tally.yield_rate == 0.5 and tally.yielded_item_share == 0.25
    assert tally.yielded_per_turn == {0: 2, 1: 1}
