"""A stand-in parser child for the pool's supervision tests: it speaks the child protocol
(a JSON header line, then the payload on stdin; one JSON result on stdout) and does what the
payload says: ``sleep N``, ``crash``, ``grandchild N`` (start a sleeping helper in its group,
then sleep N), ``spin`` (burn CPU), ``progress N S`` (N progress lines ``~page``, one every S
seconds, as the real child reports pages), ``stall N`` (report ``~pages 1``, start a sleeping helper
in its group, then sleep N with no more progress), or ``ok``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time


def main() -> None:
    header = json.loads(sys.stdin.buffer.readline())
    command = sys.stdin.buffer.read().decode().split()
    verb = command[0] if command else "ok"
    if verb == "sleep":
        time.sleep(float(command[1]))
    elif verb == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    elif verb == "grandchild":
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(json.dumps({"grandchild": helper.pid}), file=sys.stderr, flush=True)
        time.sleep(float(command[1]))
    elif verb == "progress":
        for _ in range(int(command[1])):
            time.sleep(float(command[2]))
            sys.stdout.write("~page\n")
            sys.stdout.flush()
    elif verb == "stall":
        sys.stdout.write("~pages 1\n")
        sys.stdout.flush()
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(json.dumps({"grandchild": helper.pid}), file=sys.stderr, flush=True)
        time.sleep(float(command[1]))
    elif verb == "spin":
        import resource

        resource.setrlimit(resource.RLIMIT_CPU, (header["cpu_seconds"], header["cpu_seconds"] + 1))
        while True:
            pass
    result = {"ok": True, "text": f"done {verb}", "inspection": {"pages": 1}, "pages": 1}
    sys.stdout.write(json.dumps(result))


if __name__ == "__main__":
    main()
