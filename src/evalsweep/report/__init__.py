"""Showing results: the terminal table, the JSON document and per-question files.

Everything here reads finished results; nothing here computes a score.
"""

from evalsweep.report._document import results_document, sample_lines, write_outputs
from evalsweep.report._flips import render_flips
from evalsweep.report._progress import RichProgress
from evalsweep.report._table import render_subject_table, render_table

__all__ = [
    "RichProgress",
    "render_flips",
    "render_subject_table",
    "render_table",
    "results_document",
    "sample_lines",
    "write_outputs",
]
