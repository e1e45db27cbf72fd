"""The HTML report: one self-contained file that a person would rather look at.

A terminal table answers "did anything move?"; a reviewer deciding whether to
ship a checkpoint also wants to see how sure each difference is, where in MMLU
it moved, which questions flipped and exactly what was compared. This module
renders all of that into ONE HTML file with everything inlined (styles, the
filter script, plotly.js and the result document itself), so it opens offline,
can be attached to a ticket or archived beside the checkpoints, and never makes
a network request. Plots are Plotly figures rather than hand-drawn SVG: they are
interactive (hover shows the CI, p-value and n) and render alike everywhere.

The report only reads the result document and the flips; it computes no score.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from evalsweep._numbers import PER_SCORE, UNIT, difference, interval
from evalsweep._numbers import finite as _finite
from evalsweep._numbers import fixed as _fmt
from evalsweep._numbers import p_value as _p
from evalsweep.errors import EvalsweepError
from evalsweep.report._document import _atomic_write
from evalsweep.report._html_trend import trend_section
from evalsweep.report._schema import ResultDocument, ResultRow, TaskSettings, document_json
from evalsweep.report._summary import test_label
from evalsweep.report._table import SHORT, display_names
from evalsweep.stats import Comparison
from evalsweep.text import visible

if TYPE_CHECKING:
    import plotly.graph_objects as go

#: Verdict -> (mark, CSS class, plot colour). Red and green are kept for verdicts only.
VERDICTS: dict[str, tuple[str, str, str]] = {
    "regression": ("▼", "regression", "#c62828"),
    "improvement": ("▲", "improvement", "#2e7d32"),
    "no significant change": ("=", "same", "#78909c"),
}
#: Flip rows written into the file; beyond this the file would get slow to open.
MAX_FLIP_ROWS = 5000
#: Characters of a question or response shown before "more".
SHORT_TEXT = 280

_PLOT_CONFIG = {"displaylogo": False, "responsive": True, "toImageButtonOptions": {"scale": 2}}
_FONT = dict(family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size=12)


def render_html(document: ResultDocument, flips: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """The whole report as one HTML string.

    Args:
        document: a result document from :func:`evalsweep.report.results_document`.
        flips: per candidate reference, its ``Flip.to_dict()`` rows against the
            document's baseline (may be empty, e.g. for a single checkpoint).
    """
    view = _View(document)
    figures = _Figures()
    go = _plotly()
    # A training run's trend replaces the forest plot: one panel per candidate does not
    # read with twelve or fifty checkpoints.
    trend = trend_section(document, figures.embed, go)
    sections = [
        _summary_section(view, flips),
        trend,
        _table_section(view),
        "" if trend else _forest_section(view, figures, go),
        _heatmap_section(view, figures, go),
        _passk_section(view, figures, go),
        _flips_section(view, flips),
        _provenance_section(view),
    ]
    title = "evalsweep report: " + ", ".join(view.names[c] for c in view.checkpoints)
    payload = document_json(document, indent=None, ensure_ascii=False).replace("<", "\\u003c")
    return (
        "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>\n"
        f"<meta name='generator' content='evalsweep {_e(document.evalsweep_version)}'>\n"
        f"<title>{_e(title)}</title>\n<style>{_asset('report.css')}</style>\n</head>\n<body>\n"
        f"{_nav(view)}\n<main>\n" + "\n".join(s for s in sections if s) + "\n</main>\n"
        "<script type='application/json' id='evalsweep-document'>"
        f"{payload}</script>\n<script>{_asset('report.js')}</script>\n</body>\n</html>\n"
    )


def write_html(
    path: Path | str,
    document: ResultDocument,
    flips: Mapping[str, Sequence[Mapping[str, Any]]],
) -> None:
    """Write the report atomically: a half-written file never replaces a good one."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(target, render_html(document, flips))


def _asset(name: str) -> str:
    """The report's style sheet or script, shipped as package data (``report/assets``)."""
    return resources.files("evalsweep.report").joinpath("assets", name).read_text("utf-8")


def _plotly() -> ModuleType:
    """Plotly, imported only when a report is drawn: ``import evalsweep.report`` stays light."""
    try:
        import plotly.graph_objects as go
    except ImportError as exc:  # pragma: no cover - plotly is a dependency
        raise EvalsweepError(
            f"the HTML report needs plotly ({exc}); install it with: pip install 'plotly>=5,<7'"
        ) from exc
    return go


class _View:
    """The document, indexed the ways the sections read it."""

    def __init__(self, document: ResultDocument) -> None:
        self.document = document
        results = document.results
        self.comparisons = document.comparisons
        self.checkpoints = document.references
        self.names = display_names(self.checkpoints)
        if self.comparisons:
            self.baseline: str | None = self.comparisons[0].baseline
        else:
            self.baseline = self.checkpoints[0] if len(self.checkpoints) > 1 else None
        self.candidates = [c for c in self.checkpoints if self.baseline and c != self.baseline]
        self.headline = [r for r in results if r.level == "task"]
        self.subjects = [r for r in results if r.level == "subject"]
        groups: dict[str, set[str]] = {}
        for r in self.subjects:
            groups.setdefault(r.task, set()).add(r.group or "")
        # A single-subject task gets no heatmap: its headline row says it all.
        self.subject_tasks = [task for task, found in groups.items() if len(found) > 1]
        self.columns = list(dict.fromkeys((r.task, r.metric) for r in self.headline))
        self.verdicts = {(c.candidate, c.task, c.metric, c.subject): c for c in self.comparisons}

    def label(self, reference: str) -> str:
        return self.names.get(reference, reference)

    def short(self, reference: str, limit: int = 36) -> str:
        """A label for plot axes and titles; long paths keep their distinctive end."""
        label = self.label(reference)
        return label if len(label) <= limit else "…" + label[-(limit - 1) :]


class _Figures:
    """Embeds figures; plotly.js goes inline with the first one only."""

    def __init__(self) -> None:
        self.count = 0

    def embed(self, figure: go.Figure, div_id: str) -> str:
        figure.update_layout(
            font=_FONT,
            paper_bgcolor="white",
            plot_bgcolor="white",
            hoverlabel=dict(font=_FONT),
        )
        self.count += 1
        return str(
            figure.to_html(
                full_html=False,
                include_plotlyjs=self.count == 1,
                include_mathjax=False,
                config=_PLOT_CONFIG,
                div_id=div_id,
                default_height=f"{figure.layout.height or 420}px",
            )
        )


# --- sections ---------------------------------------------------------------------------------


def _summary_section(view: _View, flips: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    document = view.document
    counts = {verdict: 0 for verdict in VERDICTS}
    for comparison in view.comparisons:
        counts[comparison.verdict] = counts.get(comparison.verdict, 0) + 1
    chips = "".join(
        f"<span class='chip {VERDICTS[v][1]}'>{VERDICTS[v][0]} {n} {_e(_plural(v, n))}</span>"
        for v, n in counts.items()
        if v in VERDICTS and (n or v != "no significant change")
    )
    if not view.comparisons:
        chips = "<span class='chip same'>one checkpoint: nothing to compare</span>"
    flipped = sum(len(rows) for rows in flips.values())
    tasks = ", ".join(dict.fromkeys(t for t, _ in view.columns)) or "—"
    baseline = (
        f"baseline <b>{_e(view.label(view.baseline))}</b>" if view.baseline else "no baseline"
    )
    return (
        "<header id='top'>"
        "<h1>evalsweep report</h1>"
        f"<p class='lede'>{len(view.checkpoints)} checkpoints on {_e(tasks)} · {baseline}"
        f" · {flipped} flipped questions · created {_e(document.created)}"
        f" · run <code>{_e(document.run_id)}</code></p>"
        f"<p class='chips'>{chips}</p>"
        "<p class='help'>Verdicts come from paired tests on the same questions, adjusted for "
        "multiplicity; a difference counts only when its adjusted p-value is at most 0.05. "
        "Hover a cell or a point for its interval and p-value.</p>"
        "</header>"
    )


def _plural(verdict: str, n: int) -> str:
    if verdict == "no significant change":
        return "no significant change"
    return verdict + ("" if n == 1 else "s")


def _table_section(view: _View) -> str:
    if not view.headline:
        return _section("table", "Side by side", "<p class='empty'>No results.</p>")
    cells = {(r.checkpoint, r.task, r.metric): r for r in view.headline}
    head = "".join(
        f"<th class='num'>{_e(task)}<br><span class='metric'>{_e(SHORT.get(metric, metric))}"
        f"</span><br><span class='n'>n={_n_of(view, task, metric)}</span></th>"
        for task, metric in view.columns
    )
    rows = []
    for checkpoint in view.checkpoints:
        label = _e(view.label(checkpoint))
        if checkpoint == view.baseline:
            label += " <span class='tag'>baseline</span>"
        row = [f"<th scope='row' title='{_e(checkpoint)}'>{label}</th>"]
        for task, metric in view.columns:
            cell = cells.get((checkpoint, task, metric))
            comparison = view.verdicts.get((checkpoint, task, metric, None))
            row.append(_result_cell(cell, comparison))
        rows.append("<tr>" + "".join(row) + "</tr>")
    notes = sorted(
        {
            f"{view.label(c.candidate)}, {c.task} {SHORT.get(c.metric, c.metric)}: {c.note}"
            for c in view.comparisons
            if c.note and c.subject is None
        }
    )
    note_list = (
        "<details class='notes'><summary>notes on the comparisons</summary><ul>"
        + "".join(f"<li>{_e(n)}</li>" for n in notes)
        + "</ul></details>"
        if notes
        else ""
    )
    body = (
        "<div class='scroll'><table class='results' id='results-table'>"
        f"<thead><tr><th>checkpoint</th>{head}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
        "<p class='help'>value ± standard error; Δ is the paired difference from the baseline "
        "in points with its verdict: <span class='regression'>▼ regression</span>, "
        "<span class='improvement'>▲ improvement</span>, = no significant change.</p>"
        f"{note_list}"
    )
    return _section("table", "Side by side", body)


def _n_of(view: _View, task: str, metric: str) -> str:
    found = [r.n for r in view.headline if (r.task, r.metric) == (task, metric)]
    return str(max(found)) if found else "—"


def _result_cell(cell: ResultRow | None, comparison: Comparison | None) -> str:
    if cell is None:
        return "<td class='num missing'>—</td>"
    text = _fmt(cell.value)
    if cell.stderr is not None:
        text += f" <span class='se'>± {_fmt(cell.stderr)}</span>"
    if comparison is None:
        return f"<td class='num'>{text}</td>"
    mark, css, _ = VERDICTS.get(comparison.verdict, ("?", "same", ""))
    title = (
        f"Δ {difference(comparison.delta)}, "
        f"95% CI {interval(comparison.ci_low, comparison.ci_high)}, "
        f"p adjusted {_p(comparison.p_adjusted)}, "
        f"n={comparison.n}{test_label(comparison.test)}: {comparison.verdict}"
    )
    return (
        f"<td class='num {css}' title='{_e(title)}' data-verdict='{_e(comparison.verdict)}'>"
        f"{text}<div class='delta'>Δ {difference(comparison.delta)} {mark}</div></td>"
    )


def _forest_section(view: _View, figures: _Figures, go: ModuleType) -> str:
    from plotly.subplots import make_subplots

    usable = [c for c in view.comparisons if _finite(c.delta)]
    if not usable:
        return _section(
            "forest",
            "Differences from the baseline",
            "<p class='empty'>No comparisons: a report needs at least two checkpoints.</p>",
        )
    metrics_per_task: dict[str, set[str]] = {}
    for c in usable:
        metrics_per_task.setdefault(c.task, set()).add(c.metric)

    def row_label(c: Comparison) -> str:
        metric = SHORT.get(c.metric, c.metric)
        if c.subject is None:
            return f"<b>{c.task}</b> · {metric}"
        extra = f" · {metric}" if len(metrics_per_task[c.task]) > 1 else ""
        return f"{c.task} / {c.subject}{extra}"

    ordered = [c for c in usable if c.subject is None] + [
        c for c in usable if c.subject is not None
    ]
    labels = list(dict.fromkeys(row_label(c) for c in ordered))
    scale = PER_SCORE
    candidates = [c for c in view.candidates if any(x.candidate == c for x in usable)]
    figure = make_subplots(
        rows=1,
        cols=len(candidates),
        shared_yaxes=True,
        horizontal_spacing=0.03,
        subplot_titles=[f"{view.short(c)} − {view.short(view.baseline or '')}" for c in candidates],
    )
    for column, candidate in enumerate(candidates, start=1):
        mine = [c for c in ordered if c.candidate == candidate]
        for verdict, (mark, _, colour) in VERDICTS.items():
            points = [c for c in mine if c.verdict == verdict]
            if not points:
                continue
            significant = verdict != "no significant change"
            figure.add_trace(
                go.Scatter(
                    x=[c.delta * scale for c in points],
                    y=[row_label(c) for c in points],
                    mode="markers",
                    name=f"{mark} {verdict}",
                    showlegend=False,
                    marker=dict(
                        color=colour,
                        size=11 if significant else 8,
                        symbol="diamond" if significant else "circle",
                        line=dict(width=1, color="white"),
                    ),
                    error_x=dict(
                        type="data",
                        symmetric=False,
                        array=[_gap(c.ci_high, c.delta) * scale for c in points],
                        arrayminus=[_gap(c.delta, c.ci_low) * scale for c in points],
                        color=colour,
                        thickness=1.5,
                        width=3,
                    ),
                    customdata=[_forest_hover(c) for c in points],
                    hovertemplate="%{y}<br>%{customdata}<extra></extra>",
                ),
                row=1,
                col=column,
            )
        figure.add_vline(x=0, line=dict(color="#444", width=1, dash="dot"), row=1, col=column)
        figure.update_xaxes(
            title_text=f"Δ ({UNIT})",
            zeroline=False,
            gridcolor="#eee",
            row=1,
            col=column,
        )
    figure.update_yaxes(
        categoryorder="array",
        categoryarray=labels,
        autorange="reversed",
        gridcolor="#f3f3f3",
    )
    figure.update_layout(
        height=150 + 24 * len(labels),
        margin=dict(l=10, r=20, t=40, b=50),
    )
    figure.update_annotations(font=dict(size=13))
    body = (
        "<p class='help'>Each point is a candidate's paired difference from the baseline with "
        "its 95% confidence interval, per task and per subject (MMLU, BIG-Bench Hard). "
        "Filled diamonds are significant after multiplicity adjustment.</p>"
        "<p class='legend'><span class='regression'>◆ regression</span>"
        "<span class='improvement'>◆ improvement</span>"
        "<span class='same'>● no significant change</span>"
        "<span class='same'>┆ no difference</span></p>" + figures.embed(figure, "forest-plot")
    )
    return _section("forest", "Differences from the baseline", body)


def _forest_hover(c: Comparison) -> str:
    low, high = c.ci_low, c.ci_high
    ci = "no interval"
    if _finite(low) and _finite(high):
        ci = f"95% CI {interval(low, high)}"
    text = (
        f"Δ {difference(c.delta)}, {ci}<br>"
        f"p {_p(c.p_value)}, adjusted {_p(c.p_adjusted)}, n={c.n}"
        f"{html.escape(test_label(c.test))}<br>"
        f"{c.verdict}"
    )
    if c.note:
        text += "<br><i>" + html.escape(str(c.note)) + "</i>"
    return text


def _heatmap_section(view: _View, figures: _Figures, go: ModuleType) -> str:
    parts = []
    for task in view.subject_tasks:
        rows = [r for r in view.subjects if r.task == task]
        metric = rows[0].metric
        rows = [r for r in rows if r.metric == metric]
        subjects = sorted({r.group or "" for r in rows}, key=lambda s: (_category(task, s), s))
        checkpoints = [c for c in view.checkpoints if any(r.checkpoint == c for r in rows)]
        cells = {(r.group or "", r.checkpoint): r for r in rows}
        z: list[list[float | None]] = []
        text: list[list[str]] = []
        hover: list[list[str]] = []
        for subject in subjects:
            z_row, text_row, hover_row = [], [], []
            for checkpoint in checkpoints:
                cell = cells.get((subject, checkpoint))
                value = cell.value if cell else None
                comparison = view.verdicts.get((checkpoint, task, metric, subject))
                mark = ""
                if comparison and comparison.verdict in ("regression", "improvement"):
                    mark = " " + VERDICTS[comparison.verdict][0]
                z_row.append(value if _finite(value) else None)
                text_row.append((_fmt(value, 2) if cell else "") + mark)
                hover_row.append(_heat_hover(view, subject, task, cell, comparison))
            z.append(z_row)
            text.append(text_row)
            hover.append(hover_row)
        figure = go.Figure(
            go.Heatmap(
                z=z,
                x=[view.short(c) for c in checkpoints],
                y=_subject_axis(task, subjects),
                text=text,
                texttemplate="%{text}",
                customdata=hover,
                hovertemplate="%{customdata}<extra></extra>",
                colorscale="Viridis",
                zmin=0,
                zmax=1,
                xgap=2,
                ygap=2,
                colorbar=dict(title=dict(text=SHORT.get(metric, metric)), thickness=12),
            )
        )
        figure.update_yaxes(autorange="reversed", ticks="")
        figure.update_xaxes(side="top", ticks="")
        figure.update_layout(
            height=120 + 24 * len(subjects),
            margin=dict(l=10, r=10, t=60, b=20),
            title=dict(text=f"{task}: {metric} per subject", x=0, font=dict(size=13)),
        )
        parts.append(figures.embed(figure, f"heatmap-{_slug(task)}"))
    if not parts:
        return ""
    body = (
        "<p class='help'>Score per subject and checkpoint, subjects grouped by category. "
        "▼ / ▲ mark subjects where the checkpoint differs significantly from the baseline.</p>"
        + "".join(parts)
    )
    return _section("heatmap", "Per subject", body)


def _subject_axis(task: str, subjects: Sequence[str]) -> list[Any]:
    """Subjects, under their MMLU category when known (a two-level category axis)."""
    categories = [_category(task, s) for s in subjects]
    if all(categories):
        return [[c.replace("_", " ") for c in categories], list(subjects)]
    return list(subjects)


def _heat_hover(
    view: _View,
    subject: str,
    task: str,
    cell: ResultRow | None,
    comparison: Comparison | None,
) -> str:
    lines = [f"<b>{subject}</b> ({_category(task, subject) or task})"]
    if cell is None:
        return lines[0] + "<br>no result"
    lines.append(
        f"{view.label(cell.checkpoint)}: {_fmt(cell.value)} ± {_fmt(cell.stderr)}, n={cell.n}"
    )
    if comparison is not None:
        lines.append(
            f"Δ {difference(comparison.delta)} (95% CI "
            f"{interval(comparison.ci_low, comparison.ci_high)}), "
            f"p adj. {_p(comparison.p_adjusted)}"
            f": {comparison.verdict}"
        )
    return "<br>".join(lines)


def _category(task: str, subject: str) -> str:
    """The subject's category, as its task declares (``Task.categories``)."""
    from evalsweep.tasks import benchmark_facts

    return benchmark_facts(task).categories.get(subject, "")


def _passk_section(view: _View, figures: _Figures, go: ModuleType) -> str:
    rows = [r for r in view.headline if str(r.metric).startswith("pass@")]
    if not rows:
        return _section(
            "passk",
            "pass@k",
            "<p class='empty'>No pass@k results in this report: only code tasks sampled several "
            "times per problem (HumanEval-style) report them.</p>",
        )
    parts = []
    for task in dict.fromkeys(r.task for r in rows):
        mine = sorted((r for r in rows if r.task == task), key=lambda r: _k_of(r.metric))
        figure = go.Figure()
        for index, checkpoint in enumerate(view.checkpoints):
            points = [r for r in mine if r.checkpoint == checkpoint]
            if not points:
                continue
            figure.add_trace(
                go.Scatter(
                    x=[r.metric for r in points],
                    y=[r.value for r in points],
                    mode="lines+markers",
                    name=view.short(checkpoint),
                    marker=dict(size=9, color=_palette(index)),
                    line=dict(color=_palette(index)),
                    error_y=dict(
                        type="data",
                        symmetric=False,
                        array=[_reach(r, up=True) for r in points],
                        arrayminus=[_reach(r, up=False) for r in points],
                        thickness=1.5,
                        width=4,
                    ),
                    customdata=[f"{_fmt(r.value)} ± {_fmt(r.stderr)}, n={r.n}" for r in points],
                    hovertemplate="%{x}: %{customdata}<extra>%{fullData.name}</extra>",
                )
            )
        figure.update_yaxes(title_text="pass rate", tickformat=".0%", range=[-0.02, 1.04])
        figure.update_xaxes(type="category", title_text="k")
        figure.update_layout(
            height=360,
            margin=dict(l=10, r=10, t=50, b=40),
            scattermode="group",  # side by side at each k, so equal values stay visible
            scattergap=0.7,
            title=dict(text=f"{task}: pass@k with 95% intervals", x=0, font=dict(size=13)),
        )
        parts.append(figures.embed(figure, f"passk-{_slug(task)}"))
    return _section("passk", "pass@k", "".join(parts))


def _reach(row: ResultRow, up: bool) -> float:
    """Half a normal 95% interval, clipped to [0, 1]: a pass rate cannot leave it."""
    value, half = row.value, 1.96 * (row.stderr or 0.0)
    if not _finite(value):
        return 0.0
    return max(0.0, min(half, 1.0 - value if up else value))


def _k_of(metric: str) -> tuple[int, str]:
    found = re.match(r"pass@(\d+)", metric)
    return (int(found.group(1)) if found else 10**9, metric)


def _flips_section(view: _View, flips: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    rows: list[tuple[str, Mapping[str, Any]]] = [
        (candidate, flip) for candidate, listed in flips.items() for flip in listed
    ]
    if not rows:
        message = (
            "No question changed between the baseline and any candidate."
            if view.candidates
            else "Flips need at least two checkpoints."
        )
        return _section("flips", "Flipped questions", f"<p class='empty'>{message}</p>")
    total = len(rows)
    rows = rows[:MAX_FLIP_ROWS]
    baseline = view.label(view.baseline or "baseline")
    body_rows = [_flip_row(view, candidate, flip) for candidate, flip in rows]
    filters = [
        _select("candidate", "checkpoint", [(c, view.label(c)) for c in flips if flips[c]]),
        _select("task", "task", [(t, t) for t in dict.fromkeys(f["task"] for _, f in rows)]),
        _select(
            "subject",
            "subject",
            [(s, s) for s in sorted({f["subject"] for _, f in rows if f.get("subject")})],
        ),
        _select("direction", "direction", [("regressed", "▼ regressed"), ("fixed", "▲ fixed")]),
        "<label>search <input type='search' id='flip-search' placeholder='question or answer'>"
        "</label>",
    ]
    clipped = (
        f"<p class='help'>Showing the first {MAX_FLIP_ROWS} of {total} flips.</p>"
        if total > MAX_FLIP_ROWS
        else ""
    )
    body = (
        "<p class='help'>Questions one checkpoint got right and the other wrong. "
        "<span class='regression'>▼ regressed</span>: the baseline was right; "
        "<span class='improvement'>▲ fixed</span>: the candidate was right.</p>"
        f"<form class='filters' id='flip-filters' onsubmit='return false'>{''.join(filters)}"
        f"<span class='count'>showing <b id='flip-count'>{len(rows)}</b> of {len(rows)}</span>"
        f"</form>{clipped}"
        "<div class='scroll'><table class='flips' id='flips-table'><thead><tr>"
        "<th></th><th>checkpoint</th><th>task / subject</th><th>question</th><th>target</th>"
        f"<th>{_e(baseline)} (baseline)</th><th>candidate</th></tr></thead>"
        f"<tbody>{''.join(body_rows)}</tbody></table></div>"
    )
    return _section("flips", "Flipped questions", body)


def _select(key: str, label: str, options: Iterable[tuple[str, str]]) -> str:
    listed = "".join(f"<option value='{_e(v)}'>{_e(t)}</option>" for v, t in options)
    return (
        f"<label>{_e(label)} <select data-filter='{key}' id='filter-{key}'>"
        f"<option value=''>all</option>{listed}</select></label>"
    )


def _flip_row(view: _View, candidate: str, flip: Mapping[str, Any]) -> str:
    regressed = flip["direction"] == "regressed"
    mark = "▼" if regressed else "▲"
    css = "regression" if regressed else "improvement"
    where = _e(flip["task"]) + (f" / {_e(flip['subject'])}" if flip.get("subject") else "")
    searchable = " ".join(
        str(flip.get(k) or "")
        for k in ("question", "target", "baseline_prediction", "candidate_prediction")
    ).lower()
    baseline_class, candidate_class = ("right", "wrong") if regressed else ("wrong", "right")
    return (
        f"<tr data-candidate='{_e(candidate)}' data-task='{_e(flip['task'])}' "
        f"data-subject='{_e(flip.get('subject') or '')}' data-direction='{_e(flip['direction'])}' "
        f"data-text='{_e(searchable)}'>"
        f"<td class='{css} mark' title='{_e(flip['direction'])}'>{mark}</td>"
        f"<td>{_e(view.label(candidate))}</td>"
        f"<td class='where'>{where}<br><span class='n'>#{_e(flip['doc_id'])}</span></td>"
        f"<td class='question'>{_long_text(str(flip.get('question') or ''))}"
        f"{_choices(flip.get('choices'))}</td>"
        f"<td class='answer'>{_e(flip.get('target'))}</td>"
        f"<td class='answer {baseline_class}'>"
        f"{_answer(flip.get('baseline_prediction'), flip.get('baseline_response'))}</td>"
        f"<td class='answer {candidate_class}'>"
        f"{_answer(flip.get('candidate_prediction'), flip.get('candidate_response'))}</td></tr>"
    )


def _choices(choices: Any) -> str:
    """Multiple-choice options, when the flip carries them, so a letter answer can be read."""
    if not _listy(choices) or not choices:
        return ""
    items = "".join(f"<li>{_e(c)}</li>" for c in choices)
    return f"<ol class='choices' type='A'>{items}</ol>"


def _answer(prediction: Any, response: Any) -> str:
    shown = f"<b>{_e(prediction)}</b>"
    if response:
        shown += f"<div class='response'>{_long_text(str(response))}</div>"
    return shown


def _long_text(text: str) -> str:
    if len(text) <= SHORT_TEXT:
        return _e(text)
    return (
        f"<details><summary>{_e(text[: SHORT_TEXT - 1])}…</summary>"
        f"<div class='full'>{_e(text)}</div></details>"
    )


def _provenance_section(view: _View) -> str:
    document = view.document
    parts = []
    run = {
        "run id": document.run_id,
        "created": document.created,
        "evalsweep": document.evalsweep_version,
        "command": " ".join(document.command) or None,
    }
    time_cost = {
        key: value
        for key, value in {
            "wall time of this command": _duration(document.seconds),
            "compute": document.compute,  # where a target ran it, and the spend
        }.items()
        if value not in (None, {}, [])
    }
    parts.append(
        _panel("Checkpoints: what each reference resolved to", _checkpoint_table(view), wide=True)
    )
    settings = document.settings
    parts.append(_panel("Tasks", _task_table(view, settings.tasks), wide=True))
    parts.append(_panel("Run", _kv_table({**run, **time_cost})))
    backend_and_options = {
        "backend": settings.backend,
        "options": settings.options,
        "limit": settings.limit,
        "data": settings.data,
    }
    parts.append(_panel("Backend and options", _kv_table(backend_and_options)))
    environment = dict(document.environment)
    sandbox = environment.pop("sandbox", None)
    if sandbox:
        parts.append(_panel("Sandbox layers", _sandbox_table(sandbox)))
    versions = environment.pop("versions", {}) or {}
    parts.append(_panel("Software versions", _kv_table(versions)))
    parts.append(_panel("Machine", _kv_table(environment)))
    body = (
        "<div class='panels'>"
        + "".join(parts)
        + "</div><p class='help'>The full result document is embedded in this file: "
        "<button type='button' id='save-json'>save results.json</button></p>"
    )
    return _section("provenance", "Provenance", body)


def _panel(title: str, content: str, wide: bool = False) -> str:
    css = "panel wide" if wide else "panel"
    return f"<section class='{css}'><h3>{_e(title)}</h3>{content}</section>"


def _checkpoint_table(view: _View) -> str:
    rows = []
    for entry in view.document.checkpoints:
        checkpoint = entry.checkpoint
        reference = checkpoint.reference
        label = _e(view.label(reference))
        if reference == view.baseline:
            label += " <span class='tag'>baseline</span>"
        runtime = {k: v for k, v in entry.runtime.items() if k != "loaded"}
        if not runtime:
            runtime_html = "<span class='n'>from the store; not loaded for this report</span>"
        else:
            runtime_html = _kv_table(runtime)
        rows.append(
            "<tr>"
            f"<th scope='row'>{label}</th>"
            f"<td><code>{_e(reference)}</code><br><span class='n'>{_e(checkpoint.kind)}"
            f" · {_e(checkpoint.location)}</span></td>"
            f"<td>{_e(checkpoint.revision or '—')}</td>"
            f"<td><code>{_e(checkpoint.commit or '—')}</code></td>"
            f"<td><code class='identity'>{_e(checkpoint.identity)}</code></td>"
            f"<td>{runtime_html}</td></tr>"
        )
    return (
        "<div class='scroll'><table class='kv wide'><thead><tr><th>checkpoint</th>"
        "<th>reference</th><th>revision</th><th>commit</th><th>identity</th><th>runtime</th>"
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def _task_table(view: _View, tasks: Mapping[str, TaskSettings]) -> str:
    rows = []
    for name, settings in tasks.items():
        compared = [r.n for r in view.headline if r.task == name]
        rows.append(
            f"<tr><th scope='row'>{_e(name)}</th><td>{_e(settings.version)}</td>"
            f"<td class='num'>{_e(settings.num_fewshot)}</td>"
            f"<td class='num'>{max(compared) if compared else '—'}</td>"
            f"<td><code>{_e(settings.settings_key)}</code></td></tr>"
        )
    if not rows:
        return "<p class='empty'>—</p>"
    return (
        "<table class='kv'><thead><tr><th>task</th><th>version</th><th>shots</th>"
        "<th>questions</th><th>settings key</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _sandbox_table(sandbox: Any) -> str:
    """Isolation layers as a list of {name, active, detail} or {name: [active, detail]}."""
    if isinstance(sandbox, Mapping) and "layers" in sandbox:
        layers = sandbox["layers"]
        rest = {k: v for k, v in sandbox.items() if k != "layers"}
        entries: list[tuple[str, Any, Any]] = []
        if isinstance(layers, Mapping):
            for name, value in layers.items():
                active, detail = (list(value) + [None, None])[:2] if _listy(value) else (value, "")
                entries.append((str(name), active, detail))
        elif _listy(layers):
            for layer in layers:
                if isinstance(layer, Mapping):
                    entries.append(
                        (str(layer.get("name")), layer.get("active"), layer.get("detail"))
                    )
        rows = "".join(
            f"<tr><th scope='row'>{_e(name)}</th>"
            f"<td class='{'right' if active else 'wrong'}'>{'active' if active else 'missing'}</td>"
            f"<td>{_e(detail or '')}</td></tr>"
            for name, active, detail in entries
        )
        return f"<table class='kv'><tbody>{rows}</tbody></table>" + (
            _kv_table(rest) if rest else ""
        )
    return _kv_table(sandbox) if isinstance(sandbox, Mapping) else f"<p>{_e(sandbox)}</p>"


def _kv_table(mapping: Mapping[str, Any]) -> str:
    rows = "".join(
        f"<tr><th scope='row'>{_e(key)}</th><td>{_value(value)}</td></tr>"
        for key, value in mapping.items()
    )
    return f"<table class='kv'><tbody>{rows}</tbody></table>" if rows else "<p class='empty'>—</p>"


def _value(value: Any) -> str:
    if isinstance(value, Mapping):
        return _kv_table(value)
    if _listy(value):
        if all(isinstance(v, Mapping) for v in value) and value:
            return "".join(_kv_table(v) for v in value)
        return ", ".join(_e(v) for v in value) or "—"
    if value is None:
        return "<span class='n'>—</span>"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return _e(value)


def _listy(value: Any) -> bool:
    return isinstance(value, list | tuple)


# --- navigation, formatting -------------------------------------------------------------------


def _nav(view: _View) -> str:
    links = [
        ("trend", "trend") if view.document.steps else None,
        ("table", "table"),
        None if view.document.steps else ("forest", "differences"),
        ("heatmap", "per subject") if view.subject_tasks else None,
        ("passk", "pass@k"),
        ("flips", "flips"),
        ("provenance", "provenance"),
    ]
    items = "".join(f"<a href='#{a}'>{_e(t)}</a>" for a, t in filter(None, links))
    return f"<nav><a class='brand' href='#top'>evalsweep</a>{items}</nav>"


def _section(anchor: str, title: str, body: str) -> str:
    return f"<section id='{anchor}'><h2>{_e(title)}</h2>{body}</section>"


def _e(value: Any) -> str:
    """A value as HTML text: through the one renderer (invisible and control characters shown
    escaped, :func:`evalsweep.text.visible`), then HTML-escaped."""
    return html.escape(visible("" if value is None else str(value), newlines=True), quote=True)


def _gap(high: Any, low: Any) -> float:
    return max(0.0, high - low) if _finite(high) and _finite(low) else 0.0


def _duration(seconds: Any) -> str | None:
    if not _finite(seconds):
        return None
    minutes, rest = divmod(float(seconds), 60)
    hours, minutes = divmod(int(minutes), 60)
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {rest:.0f} s"
    return f"{rest:.1f} s"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "task"


def _palette(index: int) -> str:
    """Checkpoint colours that avoid the verdict red and green."""
    colours = ("#1f77b4", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f")
    return colours[index % len(colours)]
