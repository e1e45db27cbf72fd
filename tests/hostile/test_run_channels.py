"""No run of a worker can leave a number behind for a later run to read.

The plain run holds the test (it is one process: prompt, completion, test). If
anything it does could be seen by a later run on the same worker, a program
could hand the test's expected values to its next copy's split run, which
would then "pass" without computing them. Files, memory and IPC are covered
elsewhere (fresh tmpfs, read-only root, seccomp); these cases are the counters
of the worker's pid namespace: every run is forked with the same pid, its
threads and children get the same numbers, and its /proc shows only its own
namespace, whatever earlier runs spent.
"""

from __future__ import annotations

import json
import os
import secrets
import time

import pytest

from evalsweep.execution import ExecutionRequest, ExecutionService, FunctionTest, Limits

pytestmark = pytest.mark.hostile

LIMITS = Limits(timeout=5.0, memory_mb=256)

# Spends pids three ways: threads, forked children, and a child that forks again.
SPEND = """
import os, threading
for _ in range({n}):
    t = threading.Thread(target=lambda: None)
    t.start()
    t.join()
for _ in range({n} // 4):
    pid = os.fork()
    if pid == 0:
        if os.fork() == 0:
            os._exit(0)
        os._exit(0)
    os.waitpid(pid, 0)
"""

# What a run can read of its pid namespace's counter.
LOOK = """
import json, os, sys, threading
seen = {}
def grab():
    seen["thread"] = threading.get_native_id()
t = threading.Thread(target=grab)
t.start()
t.join()
child = os.fork()
if child == 0:
    os._exit(0)
os.waitpid(child, 0)
seen.update(
    pid=os.getpid(),
    child=child,
    last=open("/proc/sys/kernel/ns_last_pid").read().strip(),
    self=os.readlink("/proc/self"),
    procs=sorted(int(name) for name in os.listdir("/proc") if name.isdigit()),
)
sys.stderr.write("SEEN" + json.dumps(seen) + "\\n")
"""


def _seen(stderr: str) -> dict[str, object]:
    lines = [line for line in stderr.splitlines() if line.startswith("SEEN")]
    assert lines, stderr
    return json.loads(lines[-1][4:])


@pytest.mark.parametrize("loop", ["C", "Python"])
def test_every_run_sees_the_same_pid_numbers_whatever_earlier_runs_spent(loop: str) -> None:
    with ExecutionService(workers=1, limits=LIMITS, native_loop=loop == "C") as service:
        report = service.start()
        layer = {layer.name: layer for layer in report.layers}["same pid every run"]
        assert layer.active, layer.detail
        requests = []
        for spent in (0, 7, 93, 0, 41, 200):
            requests.append(ExecutionRequest(SPEND.format(n=spent), limits=LIMITS))
            requests.append(ExecutionRequest(LOOK, limits=LIMITS))
        results = service.run_many(requests)
    looks = [_seen(result.stderr) for result in results[1::2]]
    assert all(result.verdict.status == "passed" for result in results), [
        (r.verdict.status, r.stderr[-300:]) for r in results
    ]
    assert all(look == looks[0] for look in looks), looks
    # Only this run shows: not the zygote (whose /proc/1/stat sums what every reaped
    # run did), and the thread and child are gone.
    assert looks[0]["procs"] == [looks[0]["pid"]]
    assert looks[0]["self"] == str(looks[0]["pid"])


def _cheater(modulus: int) -> str:
    """A program that, in its plain run, reads the expected value from the test it is
    run with and spends pids to leave it behind; in its split run, reads it back."""
    return f"""
import os, sys, threading

def _spend_until(residue):
    while (threading.get_native_id() + 1) % {modulus} != residue:
        t = threading.Thread(target=lambda: None)
        t.start()
        t.join()
        if (_last() + 1) % {modulus} == residue:
            return

def _last():
    return int(open("/proc/sys/kernel/ns_last_pid").read())

def f():
    frame = sys._getframe(1)
    constants = [c for c in frame.f_code.co_consts if isinstance(c, int) and c > 1]
    if frame.f_code.co_name == "check" and constants:  # the plain run: the test is right here
        secret = constants[0]
        while (_last() + 1) % {modulus} != 0:
            _spend_until(0)
        for _ in range(secret):
            t = threading.Thread(target=lambda: None)
            t.start()
            t.join()
        return secret
    # The split run: whatever count an earlier run left in the pid counter.
    return os.getpid() % {modulus}
"""


@pytest.mark.parametrize("loop", ["C", "Python"])
def test_a_program_cannot_hand_the_expected_value_to_its_next_copy(loop: str) -> None:
    modulus = 512
    secret = 100 + secrets.randbelow(300)
    test = FunctionTest(f"def check(candidate):\n    assert candidate() == {secret}\n", "f")
    honest = ExecutionRequest(f"def f():\n    return {secret}\n", test=test, limits=LIMITS)
    cheat = ExecutionRequest(_cheater(modulus), test=test, limits=LIMITS)
    with ExecutionService(workers=1, limits=LIMITS, native_loop=loop == "C") as service:
        results = service.run_many([honest, cheat, cheat, cheat, honest])
    verdicts = [result.verdict.status for result in results]
    assert verdicts[0] == verdicts[-1] == "passed", verdicts
    assert "passed" not in verdicts[1:-1], verdicts


# A count that lived in the zygote's own /proc entry: the minor page faults of
# every run it has reaped (/proc/1/stat's cminflt). A plain run faulted pages
# until the count encoded the expected value; the next copy read it at load.
_FAULTS_CHEATER = """
import sys, os, mmap, resource
K = 64; R = 256; M = K * R
def _cmin():
    try:
        return int(open("/proc/1/stat").read().rsplit(")", 1)[1].split()[8])
    except OSError:
        return 0
_C0 = _cmin()
def _own():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def _encode(v):
    tail = 16
    target = (v * K) % M
    need = (target - (_C0 + _own() + tail)) % M
    while need > 0:
        n = min(need, 4096)
        m = mmap.mmap(-1, n * 4096)
        for i in range(0, n * 4096, 4096):
            m[i] = 1
        m.close()
        need = (target - (_C0 + _own() + tail)) % M
        if need > M - 8:
            break
class _Spy:
    def __eq__(self, other):
        if isinstance(other, int) and 0 <= other < R:
            _encode(other)
        return True
    __hash__ = None
def f(x):
    if "check" in globals():
        return _Spy()
    return round((_C0 % M) / K) % R
"""


@pytest.mark.parametrize("loop", ["C", "Python"])
def test_a_run_cannot_read_what_the_zygote_counted_of_earlier_runs(loop: str) -> None:
    secret = 20 + secrets.randbelow(200)
    test = FunctionTest(f"def check(candidate):\n    assert candidate(7) == {secret}\n", "f")
    honest = ExecutionRequest(f"def f(x):\n    return {secret}\n", test=test, limits=LIMITS)
    cheat = ExecutionRequest(_FAULTS_CHEATER, test=test, limits=LIMITS)
    looks = ExecutionRequest(
        "import os\nSEEN = [os.path.exists('/proc/1'), os.path.exists('/proc/1/stat')]\n"
        "def f(x):\n    return SEEN\n",
        test=FunctionTest(
            "def check(candidate):\n    assert candidate(0) == [False, False]\n", "f"
        ),
        limits=LIMITS,
    )
    with ExecutionService(workers=1, limits=LIMITS, native_loop=loop == "C") as service:
        results = service.run_many([honest, cheat, cheat, cheat, cheat, looks, honest])
    verdicts = [result.verdict.status for result in results]
    assert verdicts[0] == verdicts[-1] == "passed", verdicts
    assert "passed" not in verdicts[1:5], verdicts
    assert verdicts[5] == "passed", results[5].verdict


# -- the order of the two runs across workers ---------------------------------------------------

SQUARE_TEST = FunctionTest(
    "def check(candidate):\n    assert candidate(3) == 9\n    assert candidate(-2) == 4\n", "square"
)
CUBE_TEST = FunctionTest("def check(candidate):\n    assert candidate(2) == 8\n", "cube")


def _record_runs(
    monkeypatch: pytest.MonkeyPatch, requests: list[ExecutionRequest]
) -> list[tuple[float, str, int]]:
    """Run ``requests`` over two workers in slices of two; when each split run ended and
    each plain run was sent, by request index. Every request must pass."""
    from evalsweep.execution import _worker

    events: list[tuple[float, str, int]] = []
    collect, submit_plain = _worker.Worker._collect, _worker.Worker._submit_plain

    def collected(self: _worker.Worker, flight: _worker._Flight) -> object:
        ended = collect(self, flight)
        if flight.judged or flight.stage == _worker.PLAIN:  # not the start-up probe
            events.append((time.monotonic(), flight.stage, flight.index))
        return ended

    def plain_sent(self: _worker.Worker, index: int, request: ExecutionRequest) -> object:
        events.append((time.monotonic(), "plain sent", index))
        return submit_plain(self, index, request)

    monkeypatch.setattr(_worker.Worker, "_collect", collected)
    monkeypatch.setattr(_worker.Worker, "_submit_plain", plain_sent)
    with ExecutionService(workers=2, limits=LIMITS) as service:
        results = service.run_many(requests, slice_items=2)  # spread over both workers
    assert [result.verdict.status for result in results] == ["passed"] * len(requests)
    return events


def _ordered(events: list[tuple[float, str, int]], group: set[int]) -> None:
    split_ends = [t for t, what, index in events if what == "split" and index in group]
    plain_starts = [t for t, what, index in events if what == "plain sent" and index in group]
    assert len(split_ends) == len(plain_starts) == len(group)
    assert max(split_ends) < min(plain_starts)


def test_plain_runs_of_a_test_start_after_all_its_split_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Counters the kernel shares between workers (inode numbers of new pipes and sockets,
    /proc/stat) cannot be reset per run: the service's order is what keeps a plain run's
    spending from reaching a split run of the same test. No plain run of a test may start
    before every split run of that test has ended, on every worker, however the samples
    are spread and however long one split run takes."""
    quick = "def square(x):\n    return x * x\n"
    slow = "import time\ndef square(x):\n    time.sleep(0.4)\n    return x * x\n"
    cube = "def cube(x):\n    return x ** 3\n"
    requests = [ExecutionRequest(quick, test=SQUARE_TEST) for _ in range(7)]
    requests.insert(3, ExecutionRequest(slow, test=SQUARE_TEST))  # ends last of its test
    requests += [ExecutionRequest(cube, test=CUBE_TEST) for _ in range(6)]
    events = _record_runs(monkeypatch, requests)
    for test in (SQUARE_TEST, CUBE_TEST):
        _ordered(events, {index for index, request in enumerate(requests) if request.test == test})
    # The plain runs of the quick test were not held for the slow one.
    cube_plain = min(t for t, what, index in events if what == "plain sent" and index >= 8)
    slow_end = next(t for t, what, index in events if what == "split" and index == 3)
    assert cube_plain < slow_end


# Tests that check what SQUARE_TEST checks, written otherwise: each shares a check with it,
# so a plain run of either could hand the other's split runs their expected values.
SQUARE_COPIES = {
    "a comment and blank lines": "def check(candidate):\n    # squares\n\n"
    "    assert candidate(3) == 9\n\n    assert candidate(-2) == 4  # negative\n",
    "other names, entry point and order": "def check(f):\n    assert f(-2) == 4\n"
    "    assert f(3) == 9\n",
    "one assert of the two, folded and written with is": "def check(g):\n"
    "    assert (g(-2) == 2 * 2) is True\n",
    "the checks plus one": "def check(candidate):\n    assert candidate(3) == 9\n"
    "    assert candidate(5) == 25\n",
    "a table a loop walks, a docstring, a constant": "N = -2\ndef check(candidate):\n"
    '    """Squares."""\n    for x, y in [(3, 9)]:\n        assert candidate(x) == y\n'
    "    assert candidate(N) == 4\n",
}


@pytest.mark.parametrize("copy", list(SQUARE_COPIES))
def test_plain_runs_wait_for_split_runs_of_every_test_sharing_a_check(
    copy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The order keys on what a test checks, not on its text: a copy of a test with other
    formatting, names, entry point, order or operators, part of its asserts or more, is
    ordered with it. Neither test's plain runs start before the last split run of both, the
    slow one being the copy's; a test sharing no check with them is not held."""
    copy_test = FunctionTest(SQUARE_COPIES[copy], "sq")
    quick = "def square(x):\n    return x * x\n"
    slow_copy = "import time\ndef sq(x):\n    time.sleep(0.4)\n    return x * x\n"
    cube = "def cube(x):\n    return x ** 3\n"
    requests = [ExecutionRequest(slow_copy, test=copy_test)]  # ends last of the two
    requests += [ExecutionRequest(quick, test=SQUARE_TEST) for _ in range(3)]
    requests += [ExecutionRequest(cube, test=CUBE_TEST) for _ in range(6)]
    events = _record_runs(monkeypatch, requests)
    _ordered(events, set(range(4)))
    _ordered(events, set(range(4, 10)))
    cube_plain = min(t for t, what, index in events if what == "plain sent" and index >= 4)
    slow_end = next(t for t, what, index in events if what == "split" and index == 0)
    assert cube_plain < slow_end


# -- the page cache ------------------------------------------------------------------------------

PAGE_CACHE_PROBE = r"""
import ctypes, json, mmap, os, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(os.path.realpath(sys.executable), os.O_RDONLY)
out = {}
def attempt(name, call):
    try:
        call()
        out[name] = "allowed"
    except BlockingIOError:
        out[name] = "allowed"  # RWF_NOWAIT on a page not in the cache
    except OSError as error:
        out[name] = error.errno
def mapped(advice):
    page = mmap.mmap(fd, 4096, prot=mmap.PROT_READ)
    page.madvise(advice)
def mincore():
    page = mmap.mmap(-1, 4096)
    vector = (ctypes.c_ubyte * 1)()
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    if libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(4096), vector) != 0:
        raise OSError(ctypes.get_errno(), "mincore")
def cachestat():
    span, stat = (ctypes.c_uint64 * 2)(0, 4096), (ctypes.c_uint64 * 5)()
    if libc.syscall(451, fd, span, stat, 0) != 0:
        raise OSError(ctypes.get_errno(), "cachestat")
attempt("preadv2 RWF_NOWAIT", lambda: os.preadv(fd, [bytearray(16)], 0, os.RWF_NOWAIT))
attempt("mincore", mincore)
attempt("cachestat", cachestat)
attempt("fadvise DONTNEED", lambda: os.posix_fadvise(fd, 0, 4096, os.POSIX_FADV_DONTNEED))
attempt("madvise COLD", lambda: mapped(20))
attempt("madvise PAGEOUT", lambda: mapped(21))
attempt("preadv", lambda: os.preadv(fd, [bytearray(16)], 0))
attempt("fadvise WILLNEED", lambda: os.posix_fadvise(fd, 0, 4096, os.POSIX_FADV_WILLNEED))
attempt("madvise WILLNEED", lambda: mapped(mmap.MADV_WILLNEED))
print(json.dumps(out))
"""


def test_no_run_reads_the_page_cache_without_a_clock_or_evicts_from_it() -> None:
    """The page cache is the machine's and outlives every run: a run that could evict file
    pages and another that could ask which are cached would share a channel no order of
    runs closes (a review's cheater passed its later copies through it, across services).
    Both kinds of call fail; reading files and the harmless advice stay as in one process."""
    with ExecutionService(workers=1, limits=LIMITS) as service:
        result = service.run(ExecutionRequest(PAGE_CACHE_PROBE))
    assert result.verdict.status == "passed", result.stderr
    seen = json.loads(result.stdout)
    eperm = 1
    for refused in (
        "preadv2 RWF_NOWAIT", "mincore", "cachestat", "fadvise DONTNEED", "madvise COLD",
        "madvise PAGEOUT",
    ):  # fmt: skip
        assert seen[refused] == eperm, (refused, seen)
    for allowed in ("preadv", "fadvise WILLNEED", "madvise WILLNEED"):
        assert seen[allowed] == "allowed", (allowed, seen)


# Touches every page of every file the split run has mapped (the interpreter, its
# libraries, the extension modules the zygote loaded) and counts the major faults
# (pages read from a disk) that took.
TOUCH_MAPPED = """
import ctypes, os, resource

def f():
    size = os.sysconf("SC_PAGE_SIZE")
    spans = []
    for line in open("/proc/self/maps"):
        fields = line.split(None, 5)
        if len(fields) < 6 or not fields[5].startswith("/") or not fields[1].startswith("r"):
            continue
        start, end = (int(part, 16) for part in fields[0].split("-"))
        spans.append((start, end, int(fields[2], 16), fields[5].strip()))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_majflt
    touched = 0
    for start, end, offset, path in spans:
        try:
            length = os.stat(path).st_size - offset
        except OSError:
            continue  # a file of the zygote's root: it still maps it
        for address in range(start, min(end, start + max(length, 0)) - size + 1, size):
            ctypes.string_at(address, 1)
            touched += 1
    print(resource.getrusage(resource.RUSAGE_SELF).ru_majflt - before, touched)
    return 1
"""


@pytest.mark.slow  # drops the machine's page cache: run in the serial lane
@pytest.mark.parametrize("loop", ["C", "Python"])
def test_no_page_a_split_run_has_mapped_comes_from_a_disk(loop: str) -> None:
    """Whether a page of a mapped file is cached is a bit an earlier run can set (by reading
    the file, after evicting pages by filling its memory) and a later run can read (by its
    own major-fault count). Every file the zygote maps is locked in memory for the worker's
    life, so none of those pages is ever missing, even after the page cache was emptied."""
    test = "def check(candidate):\n    assert candidate() == 1\n"
    request = ExecutionRequest(TOUCH_MAPPED, test=FunctionTest(test, "f"))
    with ExecutionService(workers=1, limits=LIMITS, native_loop=loop == "C") as service:
        layers = {layer.name: layer for layer in service.report.layers}
        assert layers["mapped files locked"].active, layers["mapped files locked"]
        service.run(request)
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as handle:  # root, as on the test machines
            handle.write("1")
        result = service.run(request)
    assert result.verdict.passed, (result.verdict, result.stderr)
    faults, touched = (int(part) for part in result.stdout.split())
    assert touched > 1000 and faults == 0, (faults, touched)
