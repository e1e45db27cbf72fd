"""The isolation report: which layers hold, as the zygote says and a sample sees.

Built once at start-up from three sources: what the zygote achieved while
setting up (each namespace, the root, the identity), what the parent set up
(cgroups, the seccomp filter), and a probe program run as an ordinary sample
that looks at the sandbox from inside. A layer the zygote reports but the
probe does not observe is reported missing.
"""

from __future__ import annotations

import contextlib
import json
import os

from . import _cgroups, _rootfs, _seccomp
from ._types import ExecutionRequest, ExecutionResult, Layer, Limits, SandboxReport
from ._worker import Outcome, Worker


def build_report(
    worker: Worker,
    limits: Limits,
    seccomp: _seccomp.SeccompFilter,
    cgroups: _cgroups.CgroupSupport | None,
    unsafe: bool,
) -> SandboxReport:
    """Every layer, active or missing, with a one-line detail."""
    if unsafe:
        return SandboxReport(
            layers=(Layer("sandbox", False, "unsafe_no_sandbox=True"),), unsafe=True
        )
    layers = {
        name: Layer(name, active, detail) for name, (active, detail) in worker.layers().items()
    }
    layers["seccomp"] = Layer(
        "seccomp", layers.get("seccomp", Layer("seccomp", False)).active, seccomp.detail
    )
    for controller in ("memory", "pids"):
        version = getattr(cgroups, controller) if cgroups is not None else None
        detail = f"cgroup {version}" if version else "no writable cgroup controller (or not root)"
        layers[f"cgroup {controller}"] = Layer(f"cgroup {controller}", version is not None, detail)
    fixed = {
        "resource limits": "address space, file size, open files, CPU, processes",
        "clean environment": "fixed environment, no inherited variables",
        "output cap": f"kill beyond {limits.output_limit_bytes} bytes",
        "verdict outside the sample": "tests run by a judge in a separate sandbox; plain data only",
    }
    for name, detail in fixed.items():
        layers[name] = Layer(name, True, detail)
    for name, observed in probe(worker).items():
        if name in layers and layers[name].active and not observed:
            layers[name] = Layer(
                name, False, "reported by the zygote but not observed from inside a sample"
            )
    loop = worker.sample_box.info.loop if worker.sample_box is not None else ""
    return SandboxReport(layers=tuple(layers.values()), sample_loop=loop)


def probe(worker: Worker) -> dict[str, bool]:
    """Look at the sandbox from inside one sample, to confirm what was reported."""
    program = _PROBE.replace("HIDDEN", json.dumps(host_paths_to_hide()))
    results: list[ExecutionResult] = []

    def keep(_index: int, outcome: Outcome) -> None:
        if isinstance(outcome, ExecutionResult):  # a request without a function test
            results.append(outcome)

    worker.run_slice([(0, ExecutionRequest(program))], keep)
    try:
        seen = json.loads(results[0].stdout)
    except (IndexError, ValueError):
        return {"seccomp": False, "read-only root": False}
    return {
        "seccomp": seen["seccomp"],
        "read-only root": not seen["root_writable"] and not seen["host_visible"],
        "network namespace": not seen["inet_connect"],
        "scratch tmpfs": seen["tmp_writable"],
        "unprivileged identity": seen["no_caps"],
    }


_PROBE = """
import json, os, socket
status = open('/proc/self/status').read()
seen = {'seccomp': 'Seccomp:\\t2' in status, 'no_caps': 'CapEff:\\t0000000000000000' in status}
def writable(path):
    try:
        with open(path, 'w') as handle:
            handle.write('x')
        os.unlink(path)
        return True
    except OSError:
        return False
seen['root_writable'] = writable('/evalsweep-probe')
seen['tmp_writable'] = writable('/tmp/evalsweep-probe')
seen['host_visible'] = [path for path in HIDDEN if os.path.lexists(path)]
try:
    socket.create_connection(('127.0.0.1', 9), timeout=0.5).close()
    seen['inet_connect'] = True
except OSError:
    seen['inet_connect'] = False
print(json.dumps(seen))
"""


def host_paths_to_hide() -> list[str]:
    """Host paths that exist here and must not exist in the sandbox."""
    bound = [bind["source"] for bind in _rootfs.root_spec()["binds"]]
    candidates = [os.path.abspath(__file__), os.getcwd()]
    home = os.path.expanduser("~")
    with contextlib.suppress(OSError):
        candidates += [os.path.join(home, entry) for entry in sorted(os.listdir(home))[:20]]
    hidden = []
    for path in candidates:
        if any(os.path.commonpath([path, source]) in (path, source) for source in bound):
            continue  # on the way to (or inside) a directory we do bind
        if path == "/" or os.path.commonpath([path, "/tmp"]) == "/tmp":
            continue  # in the sandbox /tmp is the sample's own scratch space
        hidden.append(path)
    return hidden[:10]
