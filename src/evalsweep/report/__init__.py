"""Showing results: terminal tables, the JSON document, HTML and Markdown reports.

Everything here reads finished results; nothing here computes a score.
"""

from evalsweep.report._audit import render_audit
from evalsweep.report._document import results_document, sample_lines, write_outputs, write_text
from evalsweep.report._flips import render_flips
from evalsweep.report._html import render_html, write_html
from evalsweep.report._markdown import render_markdown
from evalsweep.report._progress import RichProgress
from evalsweep.report._table import display_names, render_subject_table, render_table
from evalsweep.report._targets import render_targets

__all__ = [
    "RichProgress",
    "display_names",
    "render_audit",
    "render_flips",
    "render_html",
    "render_markdown",
    "render_subject_table",
    "render_table",
    "render_targets",
    "results_document",
    "sample_lines",
    "write_html",
    "write_outputs",
    "write_text",
]
