"""Region B budget classes and their yield order (ADR-0033, "Retrieval": its own budget class). Pure.

The host's context engine allocates Region B by class. Knowledge adds one row beside in-turn
recall, and this module holds both as data, with the allocator that decides what a turn renders:

==================  ==========  ==========  ============
class               tokens      items       yields
==================  ==========  ==========  ============
``knowledge``       3,000       3 passages  first
``in_turn_recall``  2,000       —           after knowledge
==================  ==========  ==========  ============

`allocate` works in two steps, each keeping a *prefix* of a class's ranked candidates:

1. **The class's own allowance.** Candidates are taken in rank order while the class's item and
   token limits hold; the first that does not fit ends the class (a smaller one further down is
   not slipped in — the same rule as `knowledge.core.ranking.select`).
2. **Region pressure.** If the classes together exceed the region's total, they yield in
   ``yield_order`` (lowest first). Equivalently, and this is how it is computed, room is handed out
   in the reverse order: the class that yields last keeps the longest prefix of its admitted items
   that fits the region, the next keeps the longest prefix that fits what is left, and so on. So a
   class gives up its lowest-ranked items, whole and as few as possible, and a class that yields
   later never loses an item that would have fitted had the earlier ones rendered nothing:
   knowledge yields before in-turn recall, and no belief is ever evicted to make room for a passage.

Nothing is ever truncated: an item is rendered whole or not at all. Tokens are the items' own
``tokens`` — a passage's text tokens, as the spec sizes the class ("ceiling 1,000 tokens: the budget
class holds three of these"); the envelope around the passages is not charged to the class.

What the knowledge class gave up under pressure (not what its own allowance cut) is the tracked
metric "budget pressure": `ClassAllocation.yielded_items` / ``yielded_tokens`` per turn, summed
over turns by `PressureTally` (in memory) and by the counters a turn's trace writes
(`knowledge.store.traces.budget_pressure`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from knowledge.core.memory_boundary import Belief
from knowledge.models import RetrievedPassage


@dataclass(frozen=True)
class BudgetClass:
    """One Region B row: a name, a token allowance, an optional item cap, and its place in the
    yield order (under pressure, a lower ``yield_order`` yields first)."""

    name: str
    max_tokens: int
    max_items: int | None
    yield_order: int

    def __post_init__(self) -> None:
        if self.max_tokens < 0 or (self.max_items is not None and self.max_items < 0):
            raise ValueError("a budget class's limits are non-negative")


#: Knowledge: 3 passages / 3,000 tokens, yields first.
KNOWLEDGE = BudgetClass("knowledge", max_tokens=3000, max_items=3, yield_order=0)
#: In-turn recall (beliefs): 2,000 tokens, yields only once knowledge has nothing left to give.
IN_TURN_RECALL = BudgetClass("in_turn_recall", max_tokens=2000, max_items=None, yield_order=1)
#: The Region B rows this package knows, in yield order.
REGION_B: tuple[BudgetClass, ...] = (KNOWLEDGE, IN_TURN_RECALL)


class Budgeted(Protocol):
    """Anything a class can hold: it costs ``tokens`` and is rendered whole."""

    @property
    def tokens(self) -> int: ...


@dataclass(frozen=True)
class ClassAllocation:
    """What one class rendered. Every count describes a prefix of its ranked candidates."""

    budget_class: BudgetClass
    offered: int  # candidates handed in
    admitted: int  # the prefix the class's own allowance admits
    rendered: int  # the prefix that survived region pressure (<= admitted)
    tokens: int  # tokens of the rendered items
    yielded_tokens: int  # tokens of the admitted items given up under pressure

    @property
    def yielded_items(self) -> int:
        """Items the class's allowance admitted but region pressure took away."""
        return self.admitted - self.rendered

    @property
    def yielded(self) -> bool:
        return self.rendered < self.admitted


@dataclass(frozen=True)
class RegionAllocation:
    """What a turn's Region B renders, class by class."""

    region_tokens: int
    classes: Mapping[str, ClassAllocation]

    @property
    def used_tokens(self) -> int:
        return sum(c.tokens for c in self.classes.values())

    @property
    def under_pressure(self) -> bool:
        """Whether any class had to yield."""
        return any(c.yielded for c in self.classes.values())

    def __getitem__(self, name: str) -> ClassAllocation:
        return self.classes[name]


def _check_classes(classes: Sequence[BudgetClass]) -> None:
    names = [c.name for c in classes]
    orders = [c.yield_order for c in classes]
    if len(set(names)) != len(names) or len(set(orders)) != len(orders):
        raise ValueError("budget classes need distinct names and distinct yield orders")


def _admitted_prefix(tokens: Sequence[int], cls: BudgetClass) -> int:
    used = 0
    for i, t in enumerate(tokens):
        if t < 0:
            raise ValueError("an item's tokens are non-negative")
        if (cls.max_items is not None and i >= cls.max_items) or used + t > cls.max_tokens:
            return i
        used += t
    return len(tokens)


def allocate(
    region_tokens: int, candidates: Mapping[str, Sequence[int]], classes: Sequence[BudgetClass] = REGION_B
) -> RegionAllocation:
    """Decide, for each class, how many of its ranked candidates (given as their token costs, best
    first) a turn renders within ``region_tokens``; see the module docstring for the rule.

    A class missing from ``candidates`` has none; a name in ``candidates`` that is not a class is an
    error, as is a negative total or cost.
    """
    if region_tokens < 0:
        raise ValueError("region_tokens must be non-negative")
    _check_classes(classes)
    unknown = set(candidates) - {c.name for c in classes}
    if unknown:
        raise ValueError(f"candidates for unknown budget classes: {sorted(unknown)}")
    costs = {c.name: list(candidates.get(c.name, ())) for c in classes}
    admitted = {c.name: _admitted_prefix(costs[c.name], c) for c in classes}
    kept: dict[str, int] = {}
    room = region_tokens
    for cls in sorted(classes, key=lambda c: c.yield_order, reverse=True):  # the last to yield first
        n, used = 0, 0
        while n < admitted[cls.name] and used + costs[cls.name][n] <= room:
            used += costs[cls.name][n]
            n += 1
        kept[cls.name] = n
        room -= used
    return RegionAllocation(region_tokens, {
        c.name: ClassAllocation(
            budget_class=c, offered=len(costs[c.name]), admitted=admitted[c.name], rendered=kept[c.name],
            tokens=sum(costs[c.name][: kept[c.name]]),
            yielded_tokens=sum(costs[c.name][kept[c.name]: admitted[c.name]]),
        )
        for c in classes
    })


@dataclass(frozen=True)
class TurnBudget:
    """A turn's Region B decided: the beliefs and passages it renders (prefixes of the candidates,
    whole and in rank order) and the allocation that chose them."""

    beliefs: tuple[Belief, ...]
    passages: tuple[RetrievedPassage, ...]
    allocation: RegionAllocation

    @property
    def knowledge(self) -> ClassAllocation:
        return self.allocation[KNOWLEDGE.name]

    @property
    def recall(self) -> ClassAllocation:
        return self.allocation[IN_TURN_RECALL.name]


def allocate_turn(
    region_tokens: int,
    beliefs: Sequence[Belief],
    passages: Sequence[RetrievedPassage],
    *,
    knowledge: BudgetClass = KNOWLEDGE,
    in_turn_recall: BudgetClass = IN_TURN_RECALL,
) -> TurnBudget:
    """`allocate` for a turn's two classes, returning the rendered items themselves."""
    allocation = allocate(
        region_tokens,
        {knowledge.name: [p.tokens for p in passages], in_turn_recall.name: [b.tokens for b in beliefs]},
        (knowledge, in_turn_recall),
    )
    return TurnBudget(
        beliefs=tuple(beliefs[: allocation[in_turn_recall.name].rendered]),
        passages=tuple(passages[: allocation[knowledge.name].rendered]),
        allocation=allocation,
    )


@dataclass
class PressureTally:
    """Budget pressure summed over turns, for one class (knowledge by default): how often it yielded
    and how much. Turns in which the class had nothing admitted cannot yield and count apart."""

    class_name: str = KNOWLEDGE.name
    turns: int = 0
    turns_with_candidates: int = 0  # the class's allowance admitted at least one item
    yielded_turns: int = 0
    admitted_items: int = 0
    rendered_items: int = 0
    yielded_items: int = 0
    yielded_tokens: int = 0
    yielded_per_turn: dict[int, int] = field(default_factory=dict)  # items yielded -> turns

    def add(self, allocation: RegionAllocation) -> None:
        c = allocation[self.class_name]
        self.turns += 1
        self.turns_with_candidates += c.admitted > 0
        self.yielded_turns += c.yielded
        self.admitted_items += c.admitted
        self.rendered_items += c.rendered
        self.yielded_items += c.yielded_items
        self.yielded_tokens += c.yielded_tokens
        self.yielded_per_turn[c.yielded_items] = self.yielded_per_turn.get(c.yielded_items, 0) + 1

    @property
    def yield_rate(self) -> float:
        """Share of the turns with something to render in which the class yielded."""
        return self.yielded_turns / self.turns_with_candidates if self.turns_with_candidates else 0.0

    @property
    def yielded_item_share(self) -> float:
        """Share of the admitted items given up under pressure."""
        return self.yielded_items / self.admitted_items if self.admitted_items else 0.0
