"""A stand-in parser child that speaks the child protocol (`knowledge.parsers.child`) and plays one
part per job, for the pool's and the PDF extractor's tests: ``python -m tests.supervisors.paced_child``.

The payload is a JSON object (trailing whitespace allowed: padding makes a "large" PDF):
``{"pages": P, "inspect": CMD, "extract": CMD, "ranges": {"<first page>": CMD}}`` — inspection
answers ``{"pages": P}``; an extraction of a page range plays ``ranges[first]``, a whole one
``extract`` (each ``"ok"`` when absent). A CMD is one of:

- ``ok``: answer text at once;
- ``crash``: SIGKILL itself (``pdf_killed``);
- ``refuse REASON``: answer a refusal with that reason;
- ``block``: report nothing and sleep ten minutes (holds its slot until the pool ends it);
- ``wait PATH``: answer once the file PATH exists (the test decides when);
- ``paced N S spin|sleep``: report ``~pages N`` and ``~document``, then N pages, each after S seconds
  of CPU (``spin``) or of sleep, ``~page`` after each, then answer.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path


def say(line: str) -> None:
    sys.stdout.write(f"~{line}\n")
    sys.stdout.flush()


def play(command: str, label: str) -> dict[str, object] | None:
    verb, *args = command.split()
    if verb == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    elif verb == "refuse":
        return {"ok": False, "reason": args[0], "message": f"refused by the test child ({label})"}
    elif verb == "block":
        time.sleep(600)
    elif verb == "wait":
        while not Path(args[0]).exists():
            time.sleep(0.02)
    elif verb == "paced":
        pages, seconds, how = int(args[0]), float(args[1]), args[2]
        say(f"pages {pages}")
        say("document")
        for _ in range(pages):
            if how == "spin":
                end = time.process_time() + seconds
                while time.process_time() < end:
                    pass
            else:
                time.sleep(seconds)
            say("page")
    return None


def main() -> None:
    header = json.loads(sys.stdin.buffer.readline())
    spec = json.loads(sys.stdin.buffer.read() or b"{}")
    pages = header.get("pages")
    if header["op"] == "inspect":
        command, label = spec.get("inspect", "ok"), "inspection"
    elif pages:
        command, label = spec.get("ranges", {}).get(str(pages[0]), "ok"), f"pages {pages[0]}-{pages[1]}"
    else:
        command, label = spec.get("extract", "ok"), "the whole document"
    refusal = play(command, label)
    text = (f"# Part {label}\n\nThe deploy job renders the manifests of {label} and applies them in order.\n"
            "\n\f\n\n")
    result = refusal or {"ok": True, "text": text, "inspection": {"pages": spec.get("pages", 1)}, "pages": 1}
    sys.stdout.write(json.dumps(result))


if __name__ == "__main__":
    main()
