"""One interpreter that starts every zygote of a service by forking itself.

A zygote started as a new interpreter spends most of its start-up before it
does anything of its own: about 10 ms starting Python and 25 ms importing
this runtime and the standard library it needs, and a service starts two per
worker. This process pays that once: the parent (``_sandbox.Launcher``) sends
it a zygote's control socket and log file, it forks, and the child becomes
that zygote (``zygote.serve_control``) exactly as a freshly started one would:
a new session, /dev/null on 0 and 1, the log on 2, no other descriptor, the
same environment and hash seed (the parent starts this process with the
zygotes' environment).

Each reply carries the new process's pid and a pidfd, opened before the child
can be reaped, so the parent can watch and kill it although it is not the
parent's child. This process reaps its children; it exits at end-of-file on
its socket.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from typing import NoReturn

from . import zygote
from .control import LAUNCH, LAUNCHED
from .exit_codes import SETUP_FAILED


def _reap(_signum: int, _frame: object) -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main() -> NoReturn:
    args = sys.argv[1:]
    sock = socket.socket(fileno=int(args[args.index("--launcher-fd") + 1]))
    devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    signal.signal(signal.SIGCHLD, _reap)
    while True:
        data, fds, _flags, _addr = socket.recv_fds(sock, len(LAUNCH), 2)
        if data != LAUNCH or len(fds) != 2:
            os._exit(0)  # end-of-file (the service is closing) or nonsense
        ctl, log = fds
        # Until the pidfd is open, the child must not be reaped (its pid
        # could otherwise be reused before the parent learns of it).
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        pid = os.fork()
        if pid == 0:
            _become_zygote(sock, devnull, ctl, log)
        pidfd = os.pidfd_open(pid)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        os.close(ctl)
        os.close(log)
        socket.send_fds(sock, [LAUNCHED.pack(pid)], [pidfd])
        os.close(pidfd)


def _become_zygote(sock: socket.socket, devnull: int, ctl: int, log: int) -> NoReturn:
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        os.setsid()
        os.chdir("/")
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        os.dup2(log, 2)
        keep = os.dup(ctl)
        sock.close()
        os.closerange(3, keep)
        os.closerange(keep + 1, 1 << 20)
    except BaseException:
        os._exit(SETUP_FAILED)
    zygote.serve_control(keep)
