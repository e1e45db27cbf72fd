"""Microseconds per judge -> sample round trip of a trivial call (no sandbox, no fork per call).

The judge's channel and the sample's server, each in its own process over a
socketpair, exactly as in the sandbox but without the confinement: what the
wire itself costs per call the test makes.

    PYTHONPATH=src python benchmarks/wire_roundtrip.py [calls] [int|list]

``list`` passes a three-item list (labelled, checked for changes) instead of an int.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import time

from evalsweep.execution._runtime import judge, sample

PROGRAM = "def f(x):\n    return x + 1 if isinstance(x, int) else len(x)\n"


def main(calls: int, kind: str = "int") -> None:
    # The sample's working directory is its scratch space, empty as in the sandbox: a file
    # there is one the program wrote, which the judge reports as unsupported.
    os.chdir(tempfile.mkdtemp(prefix="wire-roundtrip-"))
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        ours.close()
        sample.serve_functions(PROGRAM, theirs.fileno(), 1 << 26, ["f"])
    theirs.close()
    channel = judge.SampleChannel(ours.fileno(), 1 << 26)
    channel.hello()
    for i in range(1000):  # warm up
        channel.call(["g", "f"], (i,), {})
    started = time.perf_counter()
    if kind == "list":
        for i in range(calls):
            assert channel.call(["g", "f"], ([i, 2, 3],), {}) == 3
    else:
        for i in range(calls):
            assert channel.call(["g", "f"], (i,), {}) == i + 1
    elapsed = time.perf_counter() - started
    ours.close()
    os.waitpid(pid, 0)
    per_call = elapsed / calls * 1e6
    print(f"{calls} calls ({kind}): {elapsed:.2f} s, {per_call:.1f} us per round trip")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000, *sys.argv[2:3])
