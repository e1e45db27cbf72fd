"""The worker side of a distributed code-eval: ``evalsweep code-eval-slice``.

Reads one slice message (see :mod:`evalsweep.codeeval._slices`) from stdin,
judges its samples with evalsweep's own sandbox service on this machine, and
writes one JSON line per event to stdout, flushed: ``start`` (host, Python,
package versions, sandbox layers), each verdict as soon as it is known, then
``end`` (CPU seconds, peak memory and wall time of this worker). Samples run
with the sandbox's fixed environment: nothing of this process's environment
(secrets included) reaches them.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
import threading
from typing import IO, Any

from evalsweep.codeeval._slices import NO_SANDBOX_EXIT, decode_slice, verdict_line
from evalsweep.codeeval._usage import UsageMeter


def worker_facts() -> dict[str, Any]:
    """Host, interpreter and package versions of this worker."""
    from evalsweep import __version__

    versions = {"evalsweep": __version__, "python": platform.python_version()}
    for name in ("numpy", "ray"):
        module = sys.modules.get(name)
        if module is not None:
            versions[name] = str(getattr(module, "__version__", ""))
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    return {
        "host": socket.gethostname(),
        "python": sys.executable,
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
        "versions": versions,
        "cpus": cpus,
    }


def judge_slice(data: bytes, out: IO[str]) -> int:
    """Judge one slice message, writing event lines to ``out``; return the exit status."""
    from evalsweep.execution import ExecutionResult, ExecutionService, SandboxUnavailableError

    try:
        options, items = decode_slice(data)
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        print(f"evalsweep: error: malformed code-eval slice: {exc}", file=sys.stderr)
        return 2
    lock = threading.Lock()

    def emit(line: str) -> None:
        with lock:
            out.write(line + "\n")
            out.flush()

    import json

    meter = UsageMeter()
    meter.start()
    workers = options.get("workers")
    if not workers:
        per_slice = max(1, int(options.get("slices_per_host", 1)))
        cpus = worker_facts()["cpus"]
        workers = max(1, min(64, (2 * cpus) // per_slice))
    seed = options.get("hash_seed")
    service = ExecutionService(
        workers=int(workers),
        unsafe_no_sandbox=bool(options.get("unsafe_no_sandbox")),
        hash_seed=int(seed) if seed is not None else None,
    )
    try:
        try:
            report = service.start()
        except SandboxUnavailableError as exc:
            print(f"evalsweep: error: {exc}", file=sys.stderr)
            return NO_SANDBOX_EXIT
        emit(
            json.dumps(
                {
                    "start": {
                        **worker_facts(),
                        "workers": service.workers,
                        "sandbox": {
                            "active": list(report.active),
                            "missing": list(report.missing),
                            "unsafe": report.unsafe,
                            "summary": report.summary(),
                        },
                    }
                }
            )
        )
        positions = [position for position, _ in items]

        def on_result(index: int, result: ExecutionResult) -> None:
            if result.worker_lost:  # the service's, not a judgment: not sent
                return
            meter.add_sample(result.cpu_seconds)
            emit(verdict_line(positions[index], result))

        try:
            service.run_many([request for _, request in items], on_result)
        except SandboxUnavailableError as exc:  # a sandboxed worker died for good
            print(f"evalsweep: error: {exc}", file=sys.stderr)
            return 3
    finally:
        service.close()
        meter.stop()
    emit(json.dumps({"end": meter.as_dict()}))
    return 0
