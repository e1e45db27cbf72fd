"""Every test module says where its code lives: ``test_<area>_<topic>.py``, where the area
is a package of ``src/evalsweep`` or a top-level module of it (``evalsweep`` for the package
as a whole), the rule the README states."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "evalsweep"


def _areas() -> set[str]:
    areas = {"evalsweep"}
    for path in PACKAGE.iterdir():
        if path.is_dir() and (path / "__init__.py").is_file():
            areas.add(path.name)
        elif path.suffix == ".py" and path.stem not in ("__init__", "__main__"):
            areas.add(path.stem.lstrip("_"))
    return areas


def _strays(names: list[str], areas: set[str]) -> list[str]:
    out = []
    for file_name in names:
        name = file_name.removeprefix("test_").removesuffix(".py")
        if not any(name == area or name.startswith(area + "_") for area in areas):
            out.append(file_name)
    return out


def test_every_test_module_is_named_for_the_package_or_module_it_tests() -> None:
    areas = _areas()
    assert {"agent", "codeeval", "execution", "stats", "options", "quiet"} <= areas
    names = sorted(path.name for path in (ROOT / "tests").glob("test_*.py"))
    strays = _strays(names, areas)
    assert not strays, f"test modules not named test_<area>_<topic>.py: {strays}"


def test_the_rule_sees_a_stray() -> None:
    names = ["test_adapters.py", "test_core_engine.py", "test_statsx.py", "test_stats_sweep.py"]
    assert _strays(names, _areas()) == names[:3]
