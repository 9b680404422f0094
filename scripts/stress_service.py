"""The service under load and faults, with the invariant audit (`knowledge.stress.engine`,
`knowledge.maintenance.audit`).

    .venv/bin/python scripts/stress_service.py [--duration 60] [--loop trio|asyncio] [--faults]
        [--seed 0] [--dsn DSN] [--audit-every 10] [--tenants 3] [--ingesters 2] [--searchers 3]
        [--workers 2] [--pdf-share 0.05]
    .venv/bin/python scripts/stress_service.py --kill-host 5 [--signal KILL|INT|TERM]  # the host, mid-ingest
    .venv/bin/python scripts/stress_service.py --interrupt-cli 50 [--loop trio|asyncio] [--signal INT|TERM]
    .venv/bin/python scripts/stress_service.py --interrupt-host 100 [--loop trio|asyncio]  # a host, Ctrl-C
    .venv/bin/python scripts/stress_service.py --hosts 4 --faults [--duration 60]  # 4 host processes, one database

Prints operations/s and p50/p99 latency per operation, outcomes by reason, RSS (start, peak, end),
and the audit: leaks, partial documents, orphans, statistics, attachments, leftover processes,
connections and tasks. Exits 1 if any invariant broke. Needs ../shared/corpus.

``--hosts N``: N host processes on one PostgreSQL (a throwaway embedded server unless ``--dsn``), each
this script's own run with the same options — ingest, search, versions, deletes, attachments and
their workers — under trio and asyncio in turn, host ``i`` with seed ``--seed + i`` (its own
tenants). Every process's attachment workers serve every tenant, so each host's attachments are
claimed by all four hosts' workers (leases, retries, takeovers across processes); each host's audit
checks its tenants — leaks, partial documents, orphans, statistics, attachments settled once (no
attachment document twice, whichever process ingested it) — and its own processes, connections and
tasks. Prints each host's report, then one line per host; exits 1 if any host's audit found anything.
"""

from __future__ import annotations

import argparse
import functools
import signal
import sys
from pathlib import Path

import anyio

from knowledge.stress import host_signals
from knowledge.stress.engine import StressOptions, kill_host, run_stress
from knowledge.stress.signals import interrupt_cli, table
from knowledge.supervisors.embedded_pg import start_embedded, throwaway_data_dir

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"


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
    parser.add_argument("--interrupt-cli", type=int, default=0, metavar="ROUNDS",
                        help="signal `knowledge ingest` (--folder) at random moments (knowledge.stress.signals)")
    parser.add_argument("--interrupt-host", type=int, default=0, metavar="ROUNDS",
                        help="SIGINT a host embedding the service (knowledge.stress.host) at random moments, under "
                             "its loop's default handling (knowledge.stress.host_signals)")
    parser.add_argument("--hosts", type=int, default=1, metavar="N",
                        help="N host processes on one PostgreSQL, each a run of this script (see above)")
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="the shared corpus (default ../shared/corpus)")
    parser.add_argument("--folder", type=Path, default=None,
                        help="--interrupt-cli: the folder (default CORPUS/docs-etcd)")
    parser.add_argument("--signal", choices=["KILL", "INT", "TERM"], default=None,
                        help="--kill-host: KILL (default); --interrupt-cli: INT and TERM (default: both)")
    args = parser.parse_args()
    if args.kill_host:
        signum = signal.Signals["SIG" + (args.signal or "KILL")]
        killed = anyio.run(kill_host, args.kill_host, args.data_dir, args.dsn, args.corpus, args.seed, signum,
                            backend=args.loop)
        print("\n".join(killed.lines()))
        return 0 if killed.ok else 1
    if args.interrupt_cli:
        return interrupt(args)
    if args.interrupt_host:
        return interrupt_host(args)
    if args.hosts > 1:
        return hosts(args)
    options = StressOptions(duration=args.duration, faults=args.faults, seed=args.seed, dsn=args.dsn,
                            data_dir=args.data_dir, tenants=args.tenants, ingesters=args.ingesters,
                            searchers=args.searchers, workers=args.workers, pdf_share=args.pdf_share,
                            audit_every=args.audit_every, send_every=tuple(args.send_every), corpus=args.corpus)
    report = anyio.run(run_stress, options, backend=args.loop)
    print(f"stress: {report.seconds:.0f} s, loop={args.loop}, faults={'on' if args.faults else 'off'}, "
          f"seed={args.seed}")
    print("\n".join(report.lines()))
    return 0 if report.ok else 1


def hosts(args: argparse.Namespace) -> int:
    """``--hosts N``: N runs of this script as processes on one database (see the module docstring)."""
    with throwaway_data_dir("knowledge-hosts-", dsn=args.dsn) as data_dir:
        dsn = args.dsn or start_embedded(data_dir).dsn("knowledge")
        finished = anyio.run(functools.partial(_run_hosts, args, dsn))
    print(f"hosts: {args.hosts} processes on one PostgreSQL, {args.duration:.0f} s each, "
          f"faults={'on' if args.faults else 'off'}")
    for i, loop, code, output in finished:
        print(f"\n## host {i} (seed {args.seed + i}, {loop}): exit {code}")
        print(output.rstrip())
    print("\n| host | loop | seed | exit | audit |\n|---|---|---|---|---|")
    for i, loop, code, output in finished:
        audit = "; ".join(line.removeprefix("audit: ") for line in output.splitlines() if line.startswith("audit:"))
        print(f"| {i} | {loop} | {args.seed + i} | {code} | {audit} |")
    return 0 if all(code == 0 for _, _, code, _ in finished) else 1


async def _run_hosts(args: argparse.Namespace, dsn: str) -> list[tuple[int, str, int, str]]:
    finished: list[tuple[int, str, int, str]] = []

    async def host(i: int) -> None:
        loop = ("trio", "asyncio")[i % 2]
        command = [sys.executable, __file__, "--dsn", dsn, "--seed", str(args.seed + i), "--loop", loop,
                   "--duration", str(args.duration), "--tenants", str(args.tenants), "--ingesters", str(args.ingesters),
                   "--searchers", str(args.searchers), "--workers", str(args.workers), "--pdf-share",
                   str(args.pdf_share), "--send-every", *map(str, args.send_every), "--corpus", str(args.corpus),
                   *(["--faults"] if args.faults else []),
                   *(["--audit-every", str(args.audit_every)] if args.audit_every else [])]
        done = await anyio.run_process(command, check=False, stderr=None)
        finished.append((i, loop, done.returncode, done.stdout.decode(errors="replace")))

    async with anyio.create_task_group() as tg:
        for i in range(args.hosts):
            tg.start_soon(host, i)
    return sorted(finished)


def interrupt(args: argparse.Namespace) -> int:
    """``knowledge ingest`` signalled at random moments, on a throwaway server unless ``--dsn``."""
    signals = [signal.Signals["SIG" + args.signal]] if args.signal else [signal.SIGINT, signal.SIGTERM]
    args.folder = args.folder or args.corpus / "docs-etcd"
    with throwaway_data_dir("knowledge-interrupt-", dsn=args.dsn) as data_dir:
        dsn = args.dsn or start_embedded(data_dir).dsn("postgres")
        rounds = anyio.run(functools.partial(interrupt_cli, args.interrupt_cli, dsn, args.folder, loop=args.loop,
                                             signals=signals, seed=args.seed))
    print(f"interrupt-cli: {args.interrupt_cli} rounds of `knowledge --loop {args.loop} ingest {args.folder}`")
    print("\n".join(table(rounds)))
    return 1 if any(r.problems for r in rounds) else 0


def interrupt_host(args: argparse.Namespace) -> int:
    """A host process SIGINTed at random moments, on a throwaway server unless ``--dsn``."""
    with throwaway_data_dir("knowledge-interrupt-host-", dsn=args.dsn) as data_dir:
        dsn = args.dsn or start_embedded(data_dir).dsn("knowledge")
        rounds = anyio.run(functools.partial(host_signals.interrupt_hosts, args.interrupt_host, dsn, loop=args.loop,
                                             seed=args.seed))
    print(f"interrupt-host: {args.interrupt_host} hosts under {args.loop}, SIGINT once each (the loop's default "
          "handling)")
    print("\n".join(host_signals.table(rounds)))
    return 1 if any(r.problems for r in rounds) else 0


if __name__ == "__main__":
    sys.exit(main())
