"""The service under load and faults, with the invariant audit (`knowledge.stress`, `knowledge.audit`).

    .venv/bin/python scripts/stress_service.py [--duration 60] [--loop trio|asyncio] [--faults]
        [--seed 0] [--dsn DSN] [--audit-every 10] [--tenants 3] [--ingesters 2] [--searchers 3]
        [--workers 2] [--pdf-share 0.05]
    .venv/bin/python scripts/stress_service.py --kill-host 5      # SIGKILL the host mid-ingest 5 times

Prints operations/s and p50/p99 latency per operation, outcomes by reason, RSS (start, peak, end),
and the audit: leaks, partial documents, orphans, statistics, attachments, leftover processes,
connections and tasks. Exits 1 if any invariant broke. Needs ../shared/corpus.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import anyio

from knowledge.stress import StressOptions, kill_host, run_stress


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--loop", choices=["trio", "asyncio"], default="trio")
    parser.add_argument("--faults", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--audit-every", type=float, default=None)
    parser.add_argument("--tenants", type=int, default=3)
    parser.add_argument("--ingesters", type=int, default=2)
    parser.add_argument("--searchers", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pdf-share", type=float, default=0.05)
    parser.add_argument("--send-every", type=float, nargs=2, default=(0.05, 0.3), metavar=("MIN", "MAX"),
                        help="seconds between attachments (the arm on: e.g. 1 6)")
    parser.add_argument("--kill-host", type=int, default=0, metavar="ROUNDS")
    args = parser.parse_args()
    if args.kill_host:
        killed = anyio.run(kill_host, args.kill_host, args.data_dir, args.dsn, args.seed, backend=args.loop)
        print("\n".join(killed.lines()))
        return 0 if killed.ok else 1
    options = StressOptions(duration=args.duration, faults=args.faults, seed=args.seed, dsn=args.dsn,
                            data_dir=args.data_dir, tenants=args.tenants, ingesters=args.ingesters,
                            searchers=args.searchers, workers=args.workers, pdf_share=args.pdf_share,
                            audit_every=args.audit_every, send_every=tuple(args.send_every))
    report = anyio.run(run_stress, options, backend=args.loop)
    print(f"stress: {report.seconds:.0f} s, loop={args.loop}, faults={'on' if args.faults else 'off'}, "
          f"seed={args.seed}")
    print("\n".join(report.lines()))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
