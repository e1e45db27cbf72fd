"""Extension points: tasks, backends and target kinds, each one :class:`Registry`.

Each kind of extension has one registry, in one place:

- tasks: ``TASKS`` in :mod:`evalsweep.tasks` (entry point group ``evalsweep.tasks``),
- backends: ``BACKENDS`` in :mod:`evalsweep.models` (group ``evalsweep.backends``),
- target kinds: ``TARGET_KINDS`` in :mod:`evalsweep.compute._kinds` (group
  ``evalsweep.targets``).

evalsweep's own extensions are one line each there (``registry.add(name, "module:attr")``).
An installed package adds its own through Python entry points (``[project.entry-points.
"evalsweep.tasks"]`` in its ``pyproject.toml``); each names the object the registry's
kind expects (a task factory, a backend class, a target class: ``docs/extending.md``).

Entry points are read when a name that is not built in is asked for, or when every
name is listed, never to start the command line; the object an entry point names is
imported only when that name is used. So a broken or missing package breaks nothing
that does not name it, and naming it is one line that names the entry point and its
package. A package's name that is already evalsweep's own (or another package's) is
refused, said once on stderr: the built-in (or the first package) keeps it.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from evalsweep.errors import EvalsweepError

#: What a registered name may look like: it is written in option values (``--tasks a,b``),
#: configuration tables and file names.
NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")

BUILT_IN = "built-in"

_said: set[str] = set()


def _say_once(message: str) -> None:
    """One warning line on stderr, once per process."""
    if message in _said:
        return
    _said.add(message)
    sys.stderr.write(f"evalsweep: warning: {message}\n")
    sys.stderr.flush()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def resolve(path: str) -> Any:
    """The object ``module:attribute`` (the attribute may be dotted) names."""
    module, _, attribute = path.partition(":")
    value: Any = importlib.import_module(module)
    for part in attribute.split(".") if attribute else ():
        value = getattr(value, part)
    return value


@dataclass(frozen=True)
class Entry:
    """One registered name: what it loads and where it came from.

    Attributes:
        name: the name commands take (``--tasks NAME``, ``--backend NAME``, ``kind = NAME``).
        value: ``module:attribute`` (imported when first used), or the object itself.
        description: one line for listings (built-ins; a package's object's docstring).
        distribution: the package that registered it (``None``: evalsweep's own).
        version: that package's version.
        entry_point: the entry point as declared (``group: name = value``).
        details: what the registry's kind keeps beside the object (a target kind's
            slice transport).
    """

    name: str
    value: Any
    description: str = ""
    distribution: str | None = None
    version: str | None = None
    entry_point: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def builtin(self) -> bool:
        return self.distribution is None

    @property
    def source(self) -> str:
        """``built-in``, or the package's name and version."""
        if self.distribution is None:
            return BUILT_IN
        return f"{self.distribution} {self.version}" if self.version else self.distribution

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "distribution": self.distribution,
            "version": self.version,
            "entry_point": self.entry_point,
            "description": self.description,
        }


class Registry(Mapping[str, Any]):
    """Names of one kind of extension and the objects they load, built-ins first.

    A mapping from name to the loaded object (``TASKS[name]()`` makes a task); iterating
    gives the built-in names in the order they were added, then the packages' names in
    sorted order.

    Args:
        kind: what a name is, in messages (``task``, ``backend``, ``target kind``).
        group: the entry point group packages add names through.
        error: the error raised for a name that cannot be loaded.
        reserved: names evalsweep answers to besides the registered ones (a task
            registry's suites and ``mmlu_<subject>``): a package cannot take them either.
    """

    def __init__(
        self,
        kind: str,
        group: str,
        error: type[EvalsweepError],
        reserved: Callable[[str], bool] | None = None,
    ) -> None:
        self.kind = kind
        self.group = group
        self.error = error
        self._reserved = reserved
        self._builtin: dict[str, Entry] = {}
        self._plugins: dict[str, Entry] | None = None
        self._loaded: dict[str, Any] = {}

    # -- declaring -----------------------------------------------------------------------

    def add(self, name: str, value: Any, description: str = "", **details: Any) -> None:
        """Register one of evalsweep's own: ``value`` is ``module:attribute`` or the object."""
        if name in self._builtin:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        self._builtin[name] = Entry(name, value, description, details=details)

    # -- reading -------------------------------------------------------------------------

    def builtin(self, name: str) -> bool:
        """``name`` is one of evalsweep's own (no entry point is read)."""
        return name in self._builtin

    def builtin_names(self) -> list[str]:
        return list(self._builtin)

    def builtin_entries(self) -> list[Entry]:
        return list(self._builtin.values())

    def entry(self, name: str) -> Entry:
        """The entry called ``name`` (KeyError when there is none)."""
        if name in self._builtin:
            return self._builtin[name]
        return self._discovered()[name]

    def entries(self) -> list[Entry]:
        """Every entry: built-ins in order, then the packages' by name."""
        return [*self._builtin.values(), *sorted(self._discovered().values(), key=_by_name)]

    def load(self, name: str) -> Any:
        """The object ``name`` registers, imported on first use.

        Raises:
            KeyError: no such name.
            EvalsweepError: (the registry's ``error``) the package's entry point does not
                load; one line naming it and its package.
        """
        if name in self._loaded:
            return self._loaded[name]
        entry = self.entry(name)
        try:
            value = resolve(entry.value) if isinstance(entry.value, str) else entry.value
        except Exception as exc:
            if entry.builtin:
                raise
            raise self.error(
                f"{self.kind} {name!r} of {entry.source} does not load (entry point "
                f"{entry.entry_point}): {_first_line(exc)}"
            ) from None
        if not callable(value):
            raise self.error(
                f"{self.kind} {name!r} of {entry.source}: entry point {entry.entry_point} names "
                f"a {type(value).__name__}, not a class or function"
            )
        self._loaded[name] = value
        return value

    def failure(self, name: str, exc: BaseException) -> EvalsweepError:
        """One line for ``name``'s object failing when called (a package's factory that
        raised, or returned what is not a :attr:`kind`)."""
        entry = self.entry(name)
        return self.error(
            f"{self.kind} {name!r} of {entry.source} (entry point {entry.entry_point}) "
            f"failed: {_first_line(exc)}"
        )

    def make(self, key: str, made: type, /, *args: Any, **kwargs: Any) -> Any:
        """Call what ``key`` registers with ``args``; a package's object that raises, or
        makes what is not a ``made``, is one line naming its entry point and package.

        Raises:
            KeyError: no such name.
            EvalsweepError: (the registry's ``error``) as said; an ``EvalsweepError`` the
                object raises itself passes unchanged.
        """
        factory = self.load(key)
        if self.builtin(key):
            return factory(*args, **kwargs)
        try:
            value = factory(*args, **kwargs)
        except EvalsweepError:
            raise
        except Exception as exc:
            raise self.failure(key, exc) from None
        if not isinstance(value, made):
            kind = f"made a {type(value).__name__}, not a {made.__name__}"
            raise self.failure(key, TypeError(kind))
        return value

    # -- Mapping ---------------------------------------------------------------------------

    def __getitem__(self, name: str) -> Any:
        return self.load(name)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        return name in self._builtin or name in self._discovered()

    def __iter__(self) -> Iterator[str]:
        return iter([entry.name for entry in self.entries()])

    def __len__(self) -> int:
        return len(self._builtin) + len(self._discovered())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.group!r}, {list(self)!r})"

    # -- packages ------------------------------------------------------------------------

    def _taken(self, name: str) -> bool:
        return name in self._builtin or (self._reserved is not None and self._reserved(name))

    def _discovered(self) -> dict[str, Entry]:
        """The packages' entries, read once; refused ones said once on stderr."""
        if self._plugins is not None:
            return self._plugins
        from importlib.metadata import entry_points

        found: dict[str, Entry] = {}
        points = sorted(entry_points(group=self.group), key=_point_order)
        for point in points:
            dist = getattr(point, "dist", None)
            name = dist.metadata["Name"] if dist is not None else None
            entry = Entry(
                point.name,
                point.value,
                distribution=name or "an unnamed package",
                version=dist.version if dist is not None else None,
                entry_point=f"{self.group}: {point.name} = {point.value}",
            )
            if NAME.fullmatch(point.name) is None:
                _say_once(
                    f"{self.kind} {point.name!r} of {entry.source} is refused: a name is "
                    "lower-case letters, digits, '_', '.' and '-' (at most 64)"
                )
            elif self._taken(point.name):
                _say_once(
                    f"{self.kind} {point.name!r} of {entry.source} is refused: evalsweep's "
                    f"own {self.kind} has that name (entry point {entry.entry_point})"
                )
            elif point.name in found:
                first = found[point.name]
                _say_once(
                    f"{self.kind} {point.name!r} of {entry.source} is refused: {first.source} "
                    f"registers that name too and keeps it (entry point {entry.entry_point})"
                )
            else:
                found[point.name] = entry
        self._plugins = found
        return found


def _point_order(point: Any) -> tuple[str, str, str]:
    """Entry points by name, then package name: the first package keeps a name."""
    dist = getattr(point, "dist", None)
    return point.name, (dist.metadata["Name"] or "") if dist is not None else "", point.value


def _by_name(entry: Entry) -> str:
    return entry.name


def listing(registry: Registry) -> list[dict[str, Any]]:
    """Every entry of ``registry`` as a row for ``evalsweep tasks``/``backends``/``targets
    --kinds``: built-ins as declared (nothing imported), each package's entry loaded, its
    description the first line of its object's docstring, or ``error`` when it does not load.
    """
    rows: list[dict[str, Any]] = []
    for entry in registry.entries():
        row = {**entry.as_dict(), "error": None}
        if not entry.builtin:
            try:
                value = registry.load(entry.name)
            except EvalsweepError as exc:
                row["error"] = str(exc)
            else:
                doc = (getattr(value, "__doc__", None) or "").strip().splitlines()
                row["description"] = doc[0] if doc else ""
        rows.append(row)
    return rows
