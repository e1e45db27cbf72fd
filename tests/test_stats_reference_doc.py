"""docs/statistics-reference.md keeps up with the statistics it describes.

Every paired test ``paired_compare`` can report (``stats.TEST_NAMES``) has its section
under "2. Paired comparison", headed by its method name, and every multiplicity
adjustment (``stats.AdjustMethod``) its line under "5. Multiplicity control".
"""

from __future__ import annotations

import re
import typing
from pathlib import Path

from evalsweep.stats import TEST_NAMES, AdjustMethod

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "statistics-reference.md"


def _sections(text: str) -> dict[str, str]:
    """Top-level section title -> its text (up to the next "## ")."""
    parts = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    return {part.splitlines()[0].strip(): part for part in parts}


def _section(title_start: str) -> str:
    sections = _sections(REFERENCE.read_text(encoding="utf-8"))
    found = [body for title, body in sections.items() if title.startswith(title_start)]
    assert len(found) == 1, f"no single section {title_start!r} in {REFERENCE.name}"
    return found[0]


def test_every_paired_test_has_its_section() -> None:
    paired = _section("2. Paired comparison")
    headed = set(re.findall(r"^### 2\.\d+ (\S+)$", paired, flags=re.MULTILINE))
    missing = sorted(set(TEST_NAMES) - headed)
    assert not missing, f"{REFERENCE.name} has no section for paired test(s) {missing}"


def test_every_adjustment_is_described() -> None:
    multiplicity = _section("5. Multiplicity control")
    for method in typing.get_args(AdjustMethod):
        assert f"**`{method}`**" in multiplicity, f"adjustment {method!r} is not described"


def test_the_doc_names_only_functions_that_exist() -> None:
    import evalsweep.stats as stats

    text = REFERENCE.read_text(encoding="utf-8")
    named = ["paired_compare", "adjust", "decide_verdict", "pass_at_k", "summarize_scores"]
    named += ["minimum_detectable_effect", "questions_needed", "stratified_se"]
    named += ["compare_pairs", "compare_sweep", "label_noise_note"]
    for name in named:
        assert f"`{name}" in text
        assert hasattr(stats, name), name
