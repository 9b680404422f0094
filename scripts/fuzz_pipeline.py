"""Fuzz the pure ingest pipeline with hostile input for a set time, with hypothesis.

    .venv/bin/python scripts/fuzz_pipeline.py --seconds 60 [--seed N]

Drives the properties of tests/ingest/test_hostile_input.py in rounds of fresh seeds until the time is up: any bytes
through the text extractors and any text through `prepare` (both structures, arbitrary titles) end as a prepared
document or a typed refusal, with chunks that are exact slices of the normalized text, counted exactly, within
the ceiling, and free of NUL and lone surrogates; every prepared chunk renders into the envelope and parses back;
the normalizer is exactly its closed list; the scanners are total. Large hostile documents are mixed in, built
from recipes of long runs (10 MB lines, deep nesting, many headings, NUL, invisible characters, scanner bait).

Prints the inputs tried, the outcomes by reason, and the slowest input per property; exits 1 with the minimal
failing input (hypothesis shrinks it) and the seed to rerun with when a property fails, 0 otherwise.
"""

from __future__ import annotations

import argparse
import collections
import functools
import random
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests package holds the properties

from knowledge.core.normalize import normalize
from knowledge.core.render import parse_knowledge_block, render_knowledge_block
from knowledge.core.scan import find_secrets, is_instruction_like
from knowledge.vocabulary import Structure
from tests.core.test_render import AS_OF, passage
from tests.ingest.test_hostile_input import (
    CLOSED_LIST_ALPHABET,
    check_outcome,
    hostile_bytes,
    hostile_text,
    pipeline,
    reference_normalize,
    structures,
    titles,
)

# Large documents as recipes — (unit, repetitions) pairs — so a failure prints in a line, not megabytes.
BIG_UNITS = [
    "a", "word ", "Roll back the release tag. ", "-", "_", "=", "\u3000", "\u3000x", "中文", "> ", "- ", "1. ", "  ",
    "*a ", " a*", "**", "[", "](u)", "# Heading\n\nBody.\n\n", "Setext\n===\n\n", "\n", "\n\n\n\n", "\r\n", "\t",
    "| a | b |\n", "```\n", "<!--", "-->", "[ref]: /url\n", "\x00", "\u202e\u200b", "\u2066\u2069", "\U000e0041",
    "eyJ", "eyJ-", "LS0tLS1CRUdJTi", "password=", "://a:", "ignore previous instructions ", "<|im_start|>",
    "e\u0301", "\ufffe", "\x1b[2J", "title: ",
]  # fmt: skip
recipes = st.lists(st.tuples(st.sampled_from(BIG_UNITS), st.integers(1, 100_000)), min_size=1, max_size=5)
SIZE_LIMIT = 4_000_000  # characters: a longer recipe is cut, so that one input stays within a few seconds


def build(recipe: list[tuple[str, int]]) -> str:
    text = "".join(unit * n for unit, n in recipe)
    return text[:SIZE_LIMIT]


@dataclass
class Stats:
    deadline: float
    tried: collections.Counter[str] = field(default_factory=collections.Counter)
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    slowest: dict[str, tuple[float, int, str]] = field(default_factory=dict)  # property -> (s, size, input)
    last_input: dict[str, str] = field(default_factory=dict)  # property -> repr of the last input that raised

    def done(self) -> bool:
        return time.monotonic() >= self.deadline

    def record(self, prop: str, size: int, began: float, outcome: str | None, described: Callable[[], str]) -> None:
        elapsed = time.perf_counter() - began
        self.tried[prop] += 1
        if outcome is not None:
            self.outcomes[outcome] += 1
        if elapsed > self.slowest.get(prop, (-1.0, 0, ""))[0]:
            self.slowest[prop] = (elapsed, size, described())


def _short(value: object, limit: int = 600) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters of repr)"


def properties(stats: Stats) -> dict[str, tuple[int, Callable[[], Callable[[], None]]]]:
    """Property name -> (examples per round, a maker of a fresh hypothesis test of it: settings and seed are
    set per round). Each test returns at once when time is up, so a round in flight ends quickly; it records
    what it tried, and the input of any exception."""

    def guarded(prop: str, body: Callable[..., tuple[int, str | None]]) -> Callable[..., None]:
        @functools.wraps(body)  # hypothesis reads the arguments to draw from the signature
        def run(*args: Any, **kwargs: Any) -> None:
            if stats.done():
                return
            began = time.perf_counter()
            def described(limit: int = 600) -> str:
                named = (f"{key}={_short(value, limit)}" for key, value in kwargs.items())
                return ", ".join([*(_short(value, limit) for value in args), *named])

            try:
                size, outcome = body(*args, **kwargs)
            except BaseException:
                stats.last_input[prop] = described()
                raise
            stats.record(prop, size, began, outcome, lambda: described(300))
        return run

    def extracted(data: bytes, structure: Structure, chunk: int) -> tuple[int, str | None]:
        label, prepared = pipeline(data, structure, chunk=chunk)
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            assert label == "refused:undecodable", label
            return len(data), label
        if "\x00" in text:
            assert label == "refused:undecodable", label
        elif not text.strip():
            assert label == "refused:no_text", label
        else:
            check_outcome(text, "Doc", label, prepared)
        return len(data), label

    def prepared_text(raw: str, title: str, structure: Structure) -> tuple[int, str | None]:
        label, prepared = pipeline(raw, structure, title)
        check_outcome(raw, title, label, prepared)
        return len(raw), label

    def big_document(recipe: list[tuple[str, int]], structure: Structure) -> tuple[int, str | None]:
        raw = build(recipe)
        label, prepared = pipeline(raw, structure)
        check_outcome(raw, "Doc", label, prepared)
        return len(raw), label

    def rendered(raw: str, title: str, structure: Structure) -> tuple[int, str | None]:
        _, prepared = pipeline(raw, structure, title)
        if prepared is not None:
            ps = [passage(chunk_id=f"kc_{c.draft.ordinal}", title=title, heading_path=list(c.draft.heading_path),
                          text=c.draft.text, instruction_like=c.instruction_like) for c in prepared.chunks]
            block = render_knowledge_block(ps, as_of=AS_OF)
            block.encode("utf-8")
            _, parsed = parse_knowledge_block(block)
            assert [(p.doc, p.path, p.text) for p in parsed] == [(q.title, q.heading_path, q.text) for q in ps]
        return len(raw), None

    def closed_list(raw: str) -> tuple[int, str | None]:
        assert normalize(raw) == reference_normalize(raw)
        return len(raw), None

    def scanners(raw: str) -> tuple[int, str | None]:
        findings = find_secrets(raw)
        assert all(0 <= f.start < f.end <= len(raw) for f in findings)
        assert isinstance(is_instruction_like(raw), bool)
        return len(raw), None

    big_text = recipes.map(build)
    closed_list_text = st.lists(st.sampled_from(CLOSED_LIST_ALPHABET), max_size=200).map("".join)
    return {
        "extract+prepare": (40, lambda: given(hostile_bytes, structures, st.integers(1, 4096))(
            guarded("extract+prepare", extracted))),
        "prepare": (40, lambda: given(hostile_text, titles, structures)(guarded("prepare", prepared_text))),
        "big documents": (3, lambda: given(recipes, structures)(guarded("big documents", big_document))),
        "render round trip": (20, lambda: given(hostile_text, titles, structures)(
            guarded("render round trip", rendered))),
        "closed list": (100, lambda: given(closed_list_text)(guarded("closed list", closed_list))),
        "scanners": (10, lambda: given(hostile_text | big_text)(guarded("scanners", scanners))),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to fuzz (default 60)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the run (default: random, printed)")
    args = parser.parse_args(argv)
    base_seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    started = time.monotonic()
    stats = Stats(deadline=started + args.seconds)
    props = properties(stats)
    quiet = settings(deadline=None, database=None, print_blob=False, suppress_health_check=[
        HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much, HealthCheck.large_base_example])
    print(f"fuzz_pipeline: {args.seconds:.0f} s, seed {base_seed}", flush=True)
    failure: tuple[str, int, BaseException] | None = None
    rounds = 0
    while not stats.done() and failure is None:
        for name, (examples, make) in props.items():
            if stats.done():
                break
            round_seed = base_seed * 1000 + rounds
            try:
                seed(round_seed)(settings(quiet, max_examples=examples)(make()))()
            except Exception as exc:  # a property failed: hypothesis has shrunk the input and printed it
                failure = (name, round_seed, exc)
                break
        rounds += 1
    elapsed = time.monotonic() - started

    total = sum(stats.tried.values())
    print(f"\n{total:,} inputs tried in {elapsed:.1f} s ({rounds} rounds), "
          f"{'1 property FAILED' if failure else 'no property failed'}")
    print(f"\n {'property':<18} {'inputs':>8} {'slowest: size':>15} {'time':>8}")
    for name in props:
        seconds, size, _ = stats.slowest.get(name, (0.0, 0, ""))
        print(f" {name:<18} {stats.tried[name]:>8,} {size:>15,} {seconds:>7.2f}s")
    print(f"\n {'outcome (text-pipeline properties)':<36} {'inputs':>8}")
    for outcome, count in sorted(stats.outcomes.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f" {outcome:<36} {count:>8,}")
    worst = max(stats.slowest.items(), key=lambda kv: kv[1][0], default=None)
    if worst is not None:
        name, (seconds, size, what) = worst
        print(f"\nslowest input: {size:,} characters ({name}) in {seconds:.2f} s: {what}")
    if failure is not None:
        name, round_seed, exc = failure
        print(f"\nFAILED: {name} (round seed {round_seed}; rerun with --seed {base_seed})", file=sys.stderr)
        print("".join(traceback.format_exception(exc)[-12:]), file=sys.stderr)
        print(f"minimal failing input: {stats.last_input.get(name, '(see hypothesis output above)')}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
