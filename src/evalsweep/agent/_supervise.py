"""The parent of one background job: runs it, redacts its output, records its end.

Started detached by the server (``python -m evalsweep.agent._supervise``) in
its own process group, so cancelling a job kills the whole group and the job
outlives the server. It copies the job's output line by line into the log
file with every secret's value replaced, stops the job at its deadline (the
budget left when it started, at most 24 hours) even when no server is
watching, and writes the exit status, end time and output size to the store.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

#: Names of the environment variables whose values must never reach the log.
REDACT_ENV = "EVALSWEEP_REDACT_NAMES"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="evalsweep.agent._supervise")
    parser.add_argument("--store", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--audit", type=int, required=True)
    parser.add_argument("--deadline", type=float, required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command

    env = dict(os.environ)
    names = [n for n in env.pop(REDACT_ENV, "").split(",") if n]
    secrets = sorted(
        ((env[n].encode(), f"[secret {n}]".encode()) for n in names if env.get(n)),
        key=lambda pair: -len(pair[0]),
    )
    stopped = {"reason": ""}
    signal.signal(signal.SIGTERM, lambda *_: stopped.update(reason="terminated"))
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    with open(args.log, "ab", buffering=0) as log:
        if time.time() >= args.deadline:
            log.write(b"evalsweep: job stopped at its deadline before it started\n")
            _record_end(args, -1, "deadline")
            return 0
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)

        def at_deadline() -> None:
            if child.poll() is None:
                stopped["reason"] = "deadline"
                log.write(b"evalsweep: job stopped at its deadline (spend or time limit)\n")
                child.terminate()
                time.sleep(10)
                if child.poll() is None:
                    child.kill()

        timer = threading.Timer(max(args.deadline - time.time(), 0.0), at_deadline)
        timer.daemon = True
        timer.start()
        assert child.stdout is not None
        for line in iter(child.stdout.readline, b""):
            for value, mask in secrets:
                line = line.replace(value, mask)
            log.write(line)
        code = child.wait()
        timer.cancel()
        log.write(f"evalsweep: job exited with status {code}\n".encode())
    _record_end(args, code, stopped["reason"])
    return 0


def _record_end(args: argparse.Namespace, code: int, reason: str) -> None:
    from evalsweep.agent._ledger import close_item
    from evalsweep.store import Store

    ended = time.time()
    if reason == "deadline":
        status, why = "stopped", "deadline reached (budget left at start, or max_job_hours)"
    elif code == 0:
        status, why = "finished", None
    else:
        status, why = "failed", f"exit status {code}"
    with Store(args.store) as store:
        with store.connection:
            # A status the server already set (cancelled, stopped) is kept.
            store.connection.execute(
                "UPDATE agent_jobs SET "
                "status = CASE WHEN status = 'running' THEN ? ELSE status END, "
                "reason = COALESCE(reason, ?), exit_code = ?, ended = ? WHERE job_id = ?",
                (status, why, code, ended, args.job),
            )
        close_item(store, args.job, ended)
        store.audit_end(args.audit, code, Path(args.log).stat().st_size)


if __name__ == "__main__":
    sys.exit(main())
