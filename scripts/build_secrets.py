"""Labelled documents for the ingest secret scan, by family and shape, with a check part of unseen shapes.

    .venv/bin/python scripts/build_secrets.py [--out secrets.jsonl] [--seed 32] [--check] [--heldout]

Each record is ``{id, text, label, family, shape, part}``: a generated Markdown document of 300-3000 words of
technical prose (headings, paragraphs, lists, tables, code fences) with one snippet of a known shape at a
random block, most often in the second half. ``label`` is ``secret`` for the families ``encoded``,
``file_format`` and ``placed`` (`secret_shapes`) and ``clean`` for ``ciphertext``, ``public_material``,
``documented_example``, ``placeholder`` and ``test_vector`` (`secret_shapes_clean`); ``shape`` names the
template variant. The split is by shape: within each family the shapes whose SHA-256 ranks in the lowest 30%
make the ``check`` part, so it holds only whole shapes the ``fit`` part never shows. ``--heldout`` adds a third
part, ``heldout``: every shape of `secret_shapes_heldout` (written after the check part was seen), whole and with
no hash split, after the other records, which it leaves as they are; without the flag it is not built.

Deterministic: every shape draws from its own ``random.Random(f"{seed}:{shape}")`` (a shape added later
changes no other shape's records), and nothing else is random. ``--check`` builds twice and verifies that
the output is identical, that every secret record holds its credential as written, and that no clean
record holds a live-looking credential outside the documented examples (with ``--heldout``, the held-out
records too, and that adding them changes no other record).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import zlib
from collections import Counter
from pathlib import Path
from random import Random

import secret_shapes  # noqa: F401  (registers the secret shapes)
import secret_shapes_clean
import secret_shapes_heldout  # (registers the held-out shapes: the heldout part, built only when asked)
import secret_shapes_more  # (registers shapes written for fitting only: always in the fit part)
import secret_shapes_more2  # (a second round of fit-only shapes)
from secret_formats import CLEAN_FAMILIES, DOMAINS, SECRET_FAMILIES, SERVICES, SHAPES, Shape, base62

PER_SHAPE = 8
MIN_WORDS, MAX_WORDS = 300, 3000  # words per document, snippet included
CHECK_SHARE = 0.3
HELDOUT = "heldout"
FAMILIES = SECRET_FAMILIES + CLEAN_FAMILIES

# --- prose --------------------------------------------------------------------------------------------

COMPONENTS = ("the ingest worker", "the scheduler", "each replica", "the gateway", "the indexer", "the export job",
              "the cache layer", "the queue consumer", "the admission webhook", "the reconciler", "the read replica",
              "the batch runner", "the compaction task", "the rate limiter", "the sidecar proxy")
TOPICS = ("ingest pipeline", "search index", "billing export", "notification fan-out", "report scheduler",
          "ledger reconciliation", "cache warm-up", "image resizing", "audit trail", "tenant migration",
          "object storage lifecycle", "feature flag rollout")
EVENTS = ("the upstream times out", "a node is drained", "the queue backs up", "a deploy is rolled back",
          "the disk fills past 80 percent", "the leader changes", "a shard is rebalanced", "the clock skews",
          "a downstream returns 503", "the connection pool is exhausted")
THINGS = ("the retry budget", "the batch size", "the flush interval", "the number of workers", "the page size",
          "the heartbeat period", "the backlog limit", "the request deadline", "the sampling rate")
DOC_KINDS = ("runbook", "design notes", "postmortem", "onboarding guide", "operations handbook", "release notes",
             "capacity review", "migration plan")
HEADINGS = ("Overview", "Background", "Goals and non-goals", "Design", "Architecture", "Data flow", "Rollout",
            "Operations", "Monitoring and alerts", "Failure modes", "Capacity", "Testing", "Open questions",
            "Migration notes", "Timeline", "Lessons learned", "Alternatives considered", "Appendix")
SENTENCES = (
    "{Comp} reads its settings once at start-up and keeps them for the life of the process.",
    "When {event}, {comp} retries with exponential backoff, capped at {n} seconds.",
    "{Comp} writes one structured log line per request, with the tenant and the latency in milliseconds.",
    "We measured a p99 latency of {ms} ms at {rps} requests per second on {n} nodes.",
    "The {topic} runs in {n} stages, and each stage can be restarted on its own.",
    "If {event}, the on-call engineer first checks the {topic} dashboard and the error budget.",
    "{Comp} holds at most {n} batches in memory and applies back-pressure beyond that.",
    "Schema changes ship in two releases: the first adds the column, the second starts reading it.",
    "Raising {thing} helped throughput, but it also made tail latency noisier during peak hours.",
    "The design keeps {comp} stateless, so a crashed pod loses nothing that is not already in the queue.",
    "We chose idempotent writes because {event} more often than the original estimate assumed.",
    "Every change to {thing} goes through review and is rolled out to one region first.",
    "During the incident, {comp} kept serving stale results for about {n} minutes before recovering.",
    "The {topic} has no hard dependency on the search cluster; it degrades to a slower path instead.",
    "Alerts fire when the error rate stays above {pct} percent for five consecutive minutes.",
    "Operators can pause the {topic} from the admin console without losing queued work.",
    "{Comp} emits a histogram of batch sizes, which made the regression easy to spot.",
    "Most of the cost comes from cross-zone traffic, not from compute.",
    "The old cron-based approach could not tell a slow run from a stuck one.",
    "A canary receives {pct} percent of traffic for an hour before the rollout continues.",
    "We keep {thing} in the deployment manifest so that a rollback restores it as well.",
    "Access to the production cluster is granted per team and reviewed every quarter.",
    "Credentials are never written to the repository; the platform injects them at run time.",
    "The migration copies {n} million rows per hour and can be resumed from the last checkpoint.",
    "Load tests replay a recorded day of traffic at twice the original speed.",
    "When {event}, {comp} marks itself unready so the load balancer stops sending it requests.",
    "The {topic} was split out of the monolith last year and now owns its own database.",
    "Timeouts are set per call site, because one global value either fails fast or hangs.",
    "{Comp} compresses payloads larger than {n} kilobytes before they are queued.",
    "Nothing in the hot path takes a lock that is held across a network call.",
    "The runbook links each alert to the query that explains it.",
    "Rotation of service accounts is automated and happens without a restart.",
    "We found that {thing} mattered less than the shape of the traffic.",
    "The team reviewed the {topic} design with the storage group before the first release.",
    "Backfills run at low priority and yield to live traffic whenever the queue grows.",
    "Each tenant gets its own partition, which keeps a noisy neighbour from starving the rest.",
    "The dashboards show saturation, errors and latency side by side for every stage.",
    "A failed health check restarts {comp} at most three times before paging a human.",
    "The first version polled every second; the current one subscribes to change events.",
    "Feature flags gate the new path, and the old one stays in place until the next quarter.",
)
LIST_ITEMS = (
    "confirm that {comp} reports ready on every node", "check the lag of the {topic} consumer group",
    "lower {thing} if the error rate keeps climbing", "page the owning team when {event}",
    "compare the latency histogram with last week's", "drain one node at a time and watch the backlog",
    "record the start and end of the maintenance window", "verify that the nightly backup finished",
    "look for repeated restarts in the last hour", "keep the change log entry short and factual",
    "note which regions were affected and for how long", "re-run the smoke tests after the rollout",
)
CODE = (
    ("bash", "kubectl -n {ns} get pods -l app={svc} -o wide\n"
             "kubectl -n {ns} rollout status deploy/{svc} --timeout=120s"),
    ("bash", "make test\nmake lint\n./scripts/smoke.sh --region {region}"),
    ("bash", "curl -sS https://{svc}.{domain}/healthz | jq .status"),
    ("yaml", "replicas: {n}\nresources:\n  requests:\n    cpu: 250m\n    memory: 512Mi\n  limits:\n    memory: 1Gi"),
    ("yaml", "probes:\n  readiness:\n    path: /ready\n    periodSeconds: 10\n  liveness:\n    path: /live\n"
             "    failureThreshold: 3"),
    ("python", "def backoff(attempt: int, cap: float = {n}.0) -> float:\n    return min(cap, 0.1 * 2 ** attempt)"),
    ("python", "for batch in chunks(rows, size={n}00):\n    queue.put(batch)\nqueue.join()"),
    ("sql", "SELECT tenant_id, count(*) AS jobs\nFROM {svc}_jobs\nWHERE state = 'failed'\nGROUP BY tenant_id\n"
            "ORDER BY jobs DESC\nLIMIT 20;"),
    ("json", '{{"name": "{svc}", "replicas": {n}, "region": "{region}", "maxBatch": {n}00}}'),
)
LEADS = ("The relevant excerpt follows.", "For reference, this is what the file looked like at the time:",
         "Captured during the review:", "The snippet below comes from the ticket.", "As found on the host:",
         "Here is the configuration in question.", "")


def slots(r: Random) -> dict[str, object]:
    comp = r.choice(COMPONENTS)
    return {"comp": comp, "Comp": comp[0].upper() + comp[1:], "event": r.choice(EVENTS), "topic": r.choice(TOPICS),
            "thing": r.choice(THINGS), "n": r.randint(2, 12), "ms": r.randint(20, 900), "rps": r.randint(2, 90) * 100,
            "pct": r.choice((1, 2, 5, 10)), "svc": r.choice(SERVICES), "ns": r.choice(("web", "data", "payments")),
            "region": r.choice(("eu-west-1", "us-east-2")), "domain": r.choice(DOMAINS)}


def paragraph(r: Random) -> str:
    return " ".join(r.choice(SENTENCES).format(**slots(r)) for _ in range(r.randint(3, 7)))


def block(r: Random) -> str:
    kind = r.random()
    if kind < 0.55:
        return paragraph(r)
    if kind < 0.68:
        return f"## {r.choice(HEADINGS)}" if r.random() < 0.6 else f"### {r.choice(HEADINGS)}"
    if kind < 0.82:
        numbered = r.random() < 0.4
        items = [r.choice(LIST_ITEMS).format(**slots(r)) for _ in range(r.randint(3, 6))]
        return "\n".join(f"{i + 1}. {t[0].upper()}{t[1:]}." if numbered else f"- {t}" for i, t in enumerate(items))
    if kind < 0.94:
        lang, code = r.choice(CODE)
        return f"```{lang}\n{code.format(**slots(r))}\n```"
    rows = "".join(f"| {t} | {r.randint(1, 60)}s | {r.choice(('yes', 'no'))} |\n" for t in r.sample(THINGS, 3))
    return f"| setting | default | reloadable |\n|---|---|---|\n{rows}".rstrip()


def prose(r: Random, words: int) -> list[str]:
    """Blocks of a generated technical document of about ``words`` words, title first."""
    blocks = [f"# {r.choice(TOPICS).capitalize()} {r.choice(DOC_KINDS)}", paragraph(r)]
    count = sum(len(b.split()) for b in blocks)
    while count < words:
        blocks.append(block(r))
        count += len(blocks[-1].split())
    return blocks


def compose(r: Random, shp: Shape, snippet: str) -> str:
    body = snippet.rstrip("\n") if shp.lang is None else f"```{shp.lang}\n{snippet.rstrip(chr(10))}\n```"
    lead = r.choice(LEADS) if shp.lang is not None else ""
    room = MAX_WORDS - len(body.split()) - len(lead.split())
    blocks = prose(r, r.randint(MIN_WORDS, room))
    while sum(len(b.split()) for b in blocks) > room:  # the last block overshot: drop the last but the title
        del blocks[-1 if len(blocks) > 2 else 1]
    at = 2 + int((len(blocks) - 2) * max(r.random(), r.random()))  # after title and first paragraph, mostly late
    blocks[at:at] = [lead, body] if lead else [body]
    return "\n\n".join(blocks) + "\n"


# --- assembly -----------------------------------------------------------------------------------------


def shape_hash(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def heldout_shapes() -> set[str]:
    """The shapes registered by `secret_shapes_heldout`: the heldout part, whole."""
    return {s.name for s in SHAPES if s.make.__module__ == secret_shapes_heldout.__name__}


def more_shapes() -> set[str]:
    """The shapes registered by `secret_shapes_more`: written to fit on, so always in the fit part (outside
    the hash split, which therefore assigns every earlier shape as before)."""
    return {s.name for s in SHAPES
            if s.make.__module__ in (secret_shapes_more.__name__, secret_shapes_more2.__name__)}


def check_shapes() -> set[str]:
    """Per family, the shapes whose SHA-256 ranks in the lowest CHECK_SHARE: the check part."""
    held: set[str] = set()
    extra = heldout_shapes() | more_shapes()
    for family in FAMILIES:
        names = sorted((s.name for s in SHAPES if s.family == family and s.name not in extra), key=shape_hash)
        held.update(names[: max(1, round(len(names) * CHECK_SHARE))])
    return held


def generate(seed: int = 32, heldout: bool = False) -> list[tuple[dict[str, str], list[str]]]:
    """Records with the needles of each secret record (its credential as written in the text)."""
    held, extra = check_shapes(), heldout_shapes()
    out = []
    for shp in SHAPES:
        if shp.name in extra and not heldout:
            continue
        part = HELDOUT if shp.name in extra else "check" if shp.name in held else "fit"
        r = Random(f"{seed}:{shp.name}")
        for i in range(PER_SHAPE):
            made = shp.make(r)
            snippet, needles = made if isinstance(made, tuple) else (made, [])
            record = {"id": "sf-" + hashlib.sha256(f"{seed}:{shp.name}:{i}".encode()).hexdigest()[:10],
                      "text": compose(r, shp, snippet), "label": "secret" if shp.family in SECRET_FAMILIES else "clean",
                      "family": shp.family, "shape": shp.name, "part": part}
            out.append((record, needles))
    return out


def build(seed: int = 32, heldout: bool = False) -> list[dict[str, str]]:
    return [record for record, _ in generate(seed, heldout)]


def filler(seed: int = 32, n: int = 40) -> list[str]:
    """Documents of the same prose with no snippet at all: a control that no refusal comes from the prose."""
    r = Random(f"{seed}:filler")
    return ["\n\n".join(prose(r, r.randint(MIN_WORDS, MAX_WORDS - 150))) + "\n" for _ in range(n)]


# --- self-check ---------------------------------------------------------------------------------------

# Live-looking credential formats that must not occur in a clean record (outside the documented examples).
LIVE = {
    "github/npm token": re.compile(r"(?:gh[pousr]|npm)_([A-Za-z0-9]{36})"),
    "aws key id": re.compile(r"(?:AKIA|ASIA)[A-Z0-9]{16}"),
    "stripe live key": re.compile(r"[sr]k_live_[A-Za-z0-9]{20,}"),
    "slack token": re.compile(r"xox[abposr]-[0-9]{6,}-[0-9]{6,}-[A-Za-z0-9]{16,}"),
    "gitlab token": re.compile(r"glpat-[A-Za-z0-9_-]{20}"),
    "pem private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    "putty private lines": re.compile(r"Private-Lines: \d+\n[A-Za-z0-9+/]{16}"),
    "age secret key": re.compile(r"AGE-SECRET-KEY-1[0-9A-Z]{58}"),
    "wireguard private key": re.compile(r"PrivateKey\s*=\s*[A-Za-z0-9+/]{43}="),
    "azure account key": re.compile(r"AccountKey=[A-Za-z0-9+/]{86}=="),
    "sas signature": re.compile(r"[?&]sig=[A-Za-z0-9%+/]{30,}"),
    "jwt": re.compile(r"eyJ[A-Za-z0-9_-]+\.eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{20,}"),
    "url password": re.compile(r"://[^\s:/@]+:([^\s/@$<{]{8,})@"),
    "sentry dsn": re.compile(r"https://[0-9a-f]{32}@"),
    "provider prefix": re.compile(r"pypi-AgE|\.atlasv1\.|glc_[A-Za-z0-9+/]{20}|SG\.[\w-]{22}\.|AIza[\w-]{35}"),
}
DOCUMENTED = (*secret_shapes_clean.DOCUMENTED, *secret_shapes_heldout.DOCUMENTED, *secret_shapes_more.DOCUMENTED,
              *secret_shapes_more2.DOCUMENTED)
RFC7515_JWS_HEAD = "eyJ0eXAiOiJKV1QiLA0KICJhbGciOiJIUzI1NiJ9."


def live_in_clean(text: str) -> list[str]:
    found = []
    for name, pattern in LIVE.items():
        for m in pattern.finditer(text):
            value = m.group(0)
            if any(value in known or known in value for known in DOCUMENTED) or "EXAMPLE" in value:
                continue
            if value.startswith(RFC7515_JWS_HEAD):
                continue
            if name == "github/npm token" and base62(zlib.crc32(m.group(1)[:30].encode()), 6) != m.group(1)[30:]:
                continue  # no valid checksum: not a live token
            found.append(name)
    return found


def self_check(seed: int, heldout: bool = False) -> list[str]:
    problems = []
    first = generate(seed, heldout)
    if json.dumps([rec for rec, _ in first]) != json.dumps(build(seed, heldout)):
        problems.append("build is not deterministic")
    if heldout and json.dumps([rec for rec, _ in first if rec["part"] != HELDOUT]) != json.dumps(build(seed)):
        problems.append("the held-out part changes the other records")
    if json.dumps(build(seed + 1)[:3]) == json.dumps([rec for rec, _ in first][:3]):
        problems.append("the seed changes nothing")
    if len({rec["id"] for rec, _ in first}) != len(first):
        problems.append("ids are not unique")
    for record, needles in first:
        if not MIN_WORDS <= len(record["text"].split()) <= MAX_WORDS:
            problems.append(f"{record['id']} ({record['shape']}): {len(record['text'].split())} words")
        if record["label"] == "secret":
            if not needles:
                problems.append(f"{record['id']} ({record['shape']}): no credential recorded")
            problems += [f"{record['id']} ({record['shape']}): credential not in text" for n in needles
                         if n not in record["text"]]
        else:
            problems += [f"{record['id']} ({record['shape']}): clean record holds a {name}"
                         for name in live_in_clean(record["text"])]
    problems += [f"filler document {i} holds a {name}" for i, doc in enumerate(filler(seed))
                 for name in live_in_clean(doc)]
    for family in FAMILIES:
        parts = Counter(rec["part"] for rec, _ in first if rec["family"] == family)
        if not parts["check"] or not parts["fit"] or (heldout and not parts[HELDOUT]):
            problems.append(f"{family}: a part is empty ({dict(parts)})")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the records here as JSON lines")
    parser.add_argument("--seed", type=int, default=32)
    parser.add_argument("--check", action="store_true", help="verify determinism, credentials and clean records")
    parser.add_argument("--heldout", action="store_true", help="add the heldout part (secret_shapes_heldout)")
    args = parser.parse_args()
    records = build(args.seed, args.heldout)
    extra = heldout_shapes()
    shown = [s for s in SHAPES if args.heldout or s.name not in extra]
    if args.out:
        with args.out.open("w", encoding="utf-8") as out:
            out.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    counts = Counter((rec["part"], rec["family"]) for rec in records)
    shapes = Counter((s.family, HELDOUT if s.name in extra else "check" if s.name in check_shapes() else "fit")
                     for s in shown)
    print(f"{len(records)} records, {len(shown)} shapes, seed {args.seed}" + (f" -> {args.out}" if args.out else ""))
    print(f"{'family':<20}{'label':<8}{'fit':>6}{'check':>7}" + (f"{HELDOUT:>9}" if args.heldout else "")
          + "   shapes fit/check" + (f"/{HELDOUT}" if args.heldout else ""))
    for family in FAMILIES:
        label = "secret" if family in SECRET_FAMILIES else "clean"
        print(f"{family:<20}{label:<8}{counts['fit', family]:>6}{counts['check', family]:>7}"
              + (f"{counts[HELDOUT, family]:>9}" if args.heldout else "") + "   "
              f"{shapes[family, 'fit']}/{shapes[family, 'check']}"
              + (f"/{shapes[family, HELDOUT]}" if args.heldout else ""))
    words = [len(rec["text"].split()) for rec in records]
    print(f"words per document: min {min(words)}, mean {sum(words) / len(words):.0f}, max {max(words)}")
    at = sorted(rec["text"].index(needles[0]) / len(rec["text"])
                for rec, needles in generate(args.seed, args.heldout) if needles)
    print(f"where the credential starts in a secret document (share of its length): quartiles "
          f"{at[len(at) // 4]:.2f} / {at[len(at) // 2]:.2f} / {at[3 * len(at) // 4]:.2f}")
    if args.check:
        problems = self_check(args.seed, args.heldout)
        for problem in problems:
            print("PROBLEM:", problem)
        print("self-check:", "ok" if not problems else f"{len(problems)} problems")
        return 1 if problems else 0
    return 0


assert len({s.name for s in SHAPES}) == len(SHAPES), "shape names must be unique"
assert {s.family for s in SHAPES} == set(FAMILIES)

if __name__ == "__main__":
    sys.exit(main())
