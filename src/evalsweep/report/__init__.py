"""Showing results: terminal tables, the JSON document, HTML and Markdown reports.

Everything here reads finished results; nothing here computes a score.
"""

from evalsweep.report._audit import render_audit
from evalsweep.report._document import (
    best_choice,
    results_document,
    sample_lines,
    with_best,
    write_outputs,
    write_text,
)
from evalsweep.report._flips import render_flips
from evalsweep.report._html import render_html, write_html
from evalsweep.report._markdown import render_markdown
from evalsweep.report._progress import PlainProgress, RichProgress, progress_display
from evalsweep.report._schema import (
    SCHEMA_VERSION,
    CheckpointEntry,
    Demo,
    ResultDocument,
    ResultRow,
    Settings,
    TaskSettings,
    document_json,
    parse_document,
    read_document,
)
from evalsweep.report._summary import (
    SummaryLine,
    render_summary,
    summary_text,
    verdict_summary,
)
from evalsweep.report._table import display_names, render_subject_table, render_table
from evalsweep.report._targets import render_targets
from evalsweep.report._trend import (
    Trend,
    TrendPoint,
    best_summary,
    render_trend,
    sparkline,
    trend_summary,
    trends,
)

__all__ = [
    "SCHEMA_VERSION",
    "CheckpointEntry",
    "Demo",
    "ResultDocument",
    "ResultRow",
    "Settings",
    "TaskSettings",
    "document_json",
    "parse_document",
    "read_document",
    "PlainProgress",
    "RichProgress",
    "SummaryLine",
    "Trend",
    "TrendPoint",
    "display_names",
    "render_audit",
    "render_flips",
    "render_html",
    "render_markdown",
    "render_subject_table",
    "render_summary",
    "render_table",
    "progress_display",
    "render_targets",
    "render_trend",
    "sparkline",
    "trends",
    "best_choice",
    "best_summary",
    "results_document",
    "sample_lines",
    "trend_summary",
    "with_best",
    "summary_text",
    "verdict_summary",
    "write_html",
    "write_outputs",
    "write_text",
]
