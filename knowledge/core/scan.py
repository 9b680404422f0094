"""The ingest scans (spec, "4. Scan"): pure functions over text, no I/O.

- `find_secrets` blocks ingestion: a credential in a retrievable corpus is a durable leak. The rules live in
  `knowledge.core.scan_rules` (provider formats, key containers, ``key = value`` assignments),
  `knowledge.core.scan_layers` (decoded layers, keys without a separator, ciphertext) and
  `knowledge.core.scan_context` (what a secret's name governs in code, commands and prose); they share one
  vocabulary (`knowledge.core.scan_words`) and one pass that finds every literal they start from
  (`knowledge.core.scan_marks`). `SECRET_SCAN_VERSION` names their behaviour and is bumped whenever it changes.
- `is_instruction_like` only flags: a chunk that tries to steer a model is stored with
  ``contains_instruction_like_text`` set, and the rendered envelope says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from knowledge.core.scan_rules import SpanSet, candidates

SECRET_SCAN_VERSION = "secrets-v4"  # v4: a PEM body whose line breaks became spaces


@dataclass(frozen=True)
class SecretFinding:
    """Where a credential sits in the scanned text; deliberately without the credential itself."""

    kind: str  # credential type: "github_token", "private_key", "url_password", "generic_secret", …
    start: int  # character offsets of the credential in the scanned text
    end: int
    line: int  # 1-based line of ``start``

    def __repr__(self) -> str:
        # Only positions and the kind: a finding is logged and returned in errors, the secret must not be.
        return f"SecretFinding(kind={self.kind!r}, start={self.start}, end={self.end}, line={self.line})"

    __str__ = __repr__


def find_secrets(text: str) -> list[SecretFinding]:
    """Credentials in ``text``, sorted by start offset; an empty list means the text may be ingested.

    Overlapping matches of several rules (a GitHub token assigned to ``GITHUB_TOKEN=``) are reported once,
    under the most specific rule. Pure and deterministic; never raises on any ``str``.
    """
    taken = SpanSet()
    kept: list[tuple[int, int, str]] = []
    for kind, start, end in candidates(text):
        if not taken.overlaps(start, end):
            taken.add(start, end)
            kept.append((start, end, kind))
    kept.sort()
    findings: list[SecretFinding] = []
    line, counted = 1, 0  # lines counted incrementally: a count from 0 per finding is quadratic
    for start, end, kind in kept:
        line += text.count("\n", counted, start)
        counted = start
        findings.append(SecretFinding(kind, start, end, line))
    return findings


# --- injection scan ------------------------------------------------------------------------------

INJECTION_SCAN_VERSION = "injection-v1"

# Every character that can carry or hide text without showing it; absent from almost all text, so one
# search decides whether the finer hidden-text checks run at all.
_INVISIBLE = re.compile("[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff\U000e0000-\U000e007f]")
# Unicode tag characters (U+E0000–U+E007F) spell ASCII that no renderer shows.
_TAG_CHARS = re.compile("[\U000e0000-\U000e007f]")
# Zero-width characters in a run: one ZWJ inside an emoji sequence is normal, three in a row encode bits.
_ZERO_WIDTH_RUN = re.compile("[\u200b-\u200d\u2060-\u2064\ufeff\u180e]{3,}")
# Explicit bidi overrides (LRO, RLO) make a reader see a different order than a model reads (Trojan Source).
_BIDI_OVERRIDE = re.compile("[\u202d\u202e]")
# Embeddings and isolates are legitimate around Hebrew or Arabic, and a way to hide text anywhere else.
_BIDI_OTHER = re.compile("[\u202a-\u202c\u2066-\u2069]")
_RTL_LETTER = re.compile("[\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufefc]")
_IGNORABLE = re.compile("[\u00ad\u180e\u200b-\u200f\u2060-\u2064\ufeff]")

# Each pattern starts with a literal and runs on lower-cased text: `re` then uses its fast literal search,
# where one case-insensitive alternation of the same phrases runs ~25x slower (measured on the docs corpora).
_OVERRIDE_TAIL = (
    r"\s+(?:(?:all|any|the|your|my|of|these|those|every)\s+){0,3}"
    r"(?:previous|prior|above|earlier|preceding|foregoing|original|initial|system)\s+"
    r"(?:instructions?|prompts?|directives?|rules|guidelines|messages?|commands?|context|guardrails?)\b"
)
_MODEL = r"(?:ai|llm|large\s+language\s+model|language\s+model|assistant|chatbot|ai\s+(?:assistant|agent|model))"
_STEERING_SOURCES = (
    # "ignore all previous instructions", "disregard the prior prompt", "forget your earlier rules"
    *(verb + _OVERRIDE_TAIL for verb in ("ignore", "disregard", "forget", "override", "bypass")),
    r"disregard\s+(?:all\s+|everything\s+)?(?:the\s+)?(?:above|foregoing|preceding)\b",
    r"forget\s+(?:all\s+|everything\s+)(?:the\s+)?(?:above|foregoing|preceding|before)\b",
    r"ignore\s+(?:all\s+|everything\s+)(?:of\s+)?(?:the\s+)?(?:above|foregoing|preceding)\b",
    # role play: "you are now DAN", "from now on you will", "pretend you are", "act as an unrestricted AI"
    r"you\s+are\s+(?:now|no\s+longer)\s+(?:dan\b|jailbroken|unrestricted|unfiltered|uncensored|free\s+(?:of|from)\s+"
    r"(?:all|any|your)|in\s+(?:developer|dan|god)\s+mode|(?:an?|the)\s+(?:[a-z-]+\s+){0,2}"
    r"(?:ai|assistant|chatbot|bot|persona|character|hacker)\b)",
    # "from now on, you will see the app in the UI" is documentation; "you will answer only …" is not.
    r"from\s+now\s+on,?\s+(?:you\s+(?:are\s+(?:an?|the|my|dan|no\s+longer|not)\b|must|shall|will\s+(?:be\s+(?:an?|the|my)"
    r"|act|respond|answer|reply|only|always|never|obey|ignore|pretend|speak|talk|write)\b)|act|respond|answer|reply)\b",
    r"pretend\s+(?:that\s+)?(?:you\s+are|you're)\b",  # not "pretend to be": a proxy may pretend to be a server
    r"act\s+as\s+(?:if\s+you\s+(?:are|were)\s+)?(?:an?\s+)?(?:unrestricted|unfiltered|jailbroken|evil|dan\b|"
    r"different\s+(?:ai|assistant|model)|(?:[a-z-]+\s+){0,2}(?:ai|assistant|chatbot)\b)",
    r"role[- ]?play\s+as\b",
    r"roleplay\s+as\b",
    r"your\s+new\s+(?:role|instructions?|task|persona|objective|system\s+prompt)\s+(?:is|are)\b",
    *(q + r"\s+(?:system\s+)?instructions?\s*:" for q in ("new", "updated", "real", "actual", "hidden")),
    *(
        verb + r"\s+(?:me\s+)?(?:your|the)\s+(?:full\s+|entire\s+|original\s+)?"
        r"(?:system\s+prompt|initial\s+prompt|hidden\s+instructions|instructions\s+above)"
        for verb in ("reveal", "print", "output", "repeat", "leak")
    ),
    r"developer\s+mode\s+(?:enabled|activated|on)\b",
    r"dan\s+mode\b",
    r"do\s+anything\s+now\b",
    r"without\s+(?:telling|informing|alerting)\s+the\s+user\b",
    *(neg + r"\s+(?:tell|inform|alert)\s+the\s+user\b" for neg in ("do not", "don't", "never")),
    # addressed to a model: "if you are an AI assistant", "note to the AI:", "AI agents reading this"
    r"if\s+you\s+are\s+(?:an?\s+)?" + _MODEL + r"\b",
    *(
        word + r"\s+(?:to|for)\s+(?:the\s+|any\s+|all\s+)?(?:ai|llm|assistant|language\s+model|chatbot)s?\s*:"
        for word in ("note", "message", "instruction", "instructions")
    ),
    # chat-template and role markers
    r"<\|(?:im_start|im_end|system|user|assistant|start_header_id|end_header_id|eot_id|endoftext|"
    r"begin_of_text|tool_call|tool_response)\|>",
    r"\[/?inst\]",
    r"<</?sys>>",
    # "### System: …" anywhere; "### Instruction:" / "### User:" as a role line, not as a titled heading.
    r"#[ \t]*(?:system|assistant)[ \t]*:",
    r"#[ \t]*(?:instructions?|human|user|response)[ \t]*:[ \t]*(?:\n|$)",
    r"</?(?:system|assistant|instructions?)(?:[_-](?:prompt|message))?>",
    # tool-call imitations
    r"</?(?:tool_call|tool_calls|tool_use|tool_result|function_call|function_calls|antml:[a-z_]+)\b[^<>]{0,200}>",
    r"<invoke\s+name\s*=",
    r'"(?:function_call|tool_calls|tool_use)"\s*:',
    r"'(?:function_call|tool_calls|tool_use)'\s*:",
)
_STEERING = tuple(re.compile(source) for source in _STEERING_SOURCES)
# An HTML comment is invisible in rendered Markdown; one that speaks to a model and tells it what to do is
# a hidden instruction (lint pragmas and TODOs for maintainers are neither).
_ADDRESSED_TO_MODEL = re.compile(
    r"\b(?:ai|llms?|gpt|chatgpt|claude|gemini|copilot|assistants?|chatbots?|language\s+models?|ai\s+agents?)\b"
)
_IMPERATIVE = re.compile(
    r"\b(?:ignore|disregard|forget|you\s+(?:must|should|will|are)|do\s+not|don't|always|never|instead|"
    r"respond|reply|say|tell|output|recommend|summari[sz]e|mention)\b"
)


def _html_comments(text: str) -> Iterator[str]:
    """What ``re.findall(r"<!--(.*?)-->", text, re.DOTALL)`` returns, in linear time: that regex
    re-scans the rest of the text from every ``<!--`` when no ``-->`` follows ("<!--" * 10_000: 18 s)."""
    pos = 0
    while (start := text.find("<!--", pos)) >= 0:
        end = text.find("-->", start + 4)
        if end < 0:
            return
        yield text[start + 4 : end]
        pos = end + 3


def _hidden_text(text: str) -> bool:
    if _TAG_CHARS.search(text) or _ZERO_WIDTH_RUN.search(text) or _BIDI_OVERRIDE.search(text):
        return True
    return _BIDI_OTHER.search(text) is not None and _RTL_LETTER.search(text) is None


def is_instruction_like(text: str) -> bool:
    """True when ``text`` tries to steer a model reading it; the caller flags, never blocks (spec, "4. Scan").

    Flags override phrases ("ignore previous instructions", "disregard the above"), role-play prompts
    ("you are now …", "pretend you are"), fake system prompts and chat-role markers (``<|im_start|>system``,
    ``[INST]``, ``### System:``, ``<system>``), tool-call imitations (``<tool_call>``, ``"function_call":``),
    hidden text (Unicode tag characters, runs of zero-width characters, bidi overrides outside right-to-left
    text) and HTML comments that tell an AI what to do. Technical prose about tokens, prompts, roles or
    instructions does not match. Pure; never raises.
    """
    if _INVISIBLE.search(text):
        if _hidden_text(text):
            return True
        text = _IGNORABLE.sub("", text)  # so "ig\u200bnore previous instructions" still reads as the phrase
    lowered = text.lower()
    if any(pattern.search(lowered) for pattern in _STEERING):
        return True
    return any(
        _ADDRESSED_TO_MODEL.search(comment) and _IMPERATIVE.search(comment)
        for comment in _html_comments(lowered)
    )
