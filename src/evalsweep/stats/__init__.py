"""Statistics for deciding whether a checkpoint-to-checkpoint difference is real.

Everything here follows ``docs/statistics-reference.md``: paired tests on the
same questions (exact McNemar, sign-flip permutation), paired CIs, Holm and
Benjamini-Hochberg multiplicity control, the verdict rule, minimum detectable
effects and the unbiased pass@k estimator. The CLI calls :func:`compare_sweep`;
the other names are the building blocks, public so that reports and notebooks
can show the same numbers.
"""

from evalsweep.stats._adjust import AdjustMethod, adjust
from evalsweep.stats._compare import (
    Comparison,
    FamilyScope,
    LabelNoise,
    ScoreSet,
    compare_pairs,
    compare_sweep,
    label_noise_note,
)
from evalsweep.stats._paired import TEST_NAMES, PairedComparison, PairedTest, paired_compare
from evalsweep.stats._passk import pass_at_k
from evalsweep.stats._power import minimum_detectable_effect, questions_needed
from evalsweep.stats._single import ScoreSummary, stratified_se, summarize_scores
from evalsweep.stats._validate import Scores
from evalsweep.stats._verdict import DEFAULT_ALPHA, Verdict, decide_verdict

__all__ = [
    "DEFAULT_ALPHA",
    "TEST_NAMES",
    "LabelNoise",
    "AdjustMethod",
    "Comparison",
    "FamilyScope",
    "PairedComparison",
    "PairedTest",
    "ScoreSet",
    "ScoreSummary",
    "Scores",
    "Verdict",
    "adjust",
    "compare_pairs",
    "compare_sweep",
    "decide_verdict",
    "label_noise_note",
    "minimum_detectable_effect",
    "pass_at_k",
    "paired_compare",
    "questions_needed",
    "stratified_se",
    "summarize_scores",
]
