"""The HTML report, rendered from a real sweep and opened in a real headless Chromium.

The sweep is real and small: two GPT-2s built to always answer " A" or " B"
(final layer norm zeroed, its bias set to the letter's embedding) and the
session's random ``gpt2_a``, on real MMLU rows chosen by answer letter: in
high_school_geography every answer is A, in marketing every answer is B. So
"always-B" against the "always-A" baseline is a certain regression on one
subject and a certain improvement on the other, which the report must colour.
The two subjects are also run as their own tasks so the headline table has a
red and a green cell. GSM8K (one question, 0-shot) adds a generative task.

The document is rebuilt from the store exactly as ``evalsweep report`` does:
``stored_sweep`` -> ``compare_results`` -> ``results_document`` -> ``find_flips``.

Chromium runs with every host name mapped to nothing; the page must still draw
its plots, log no console error and request nothing but itself. A full-page
screenshot is written to ``tests/artifacts/report.png`` for people to look at.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from evalsweep.report import SCHEMA_VERSION, ResultDocument, ResultRow, parse_document
from evalsweep.report._html import render_html, write_html

SUBJECTS = {"high_school_geography": "A", "marketing": "B", "world_religions": None}
SINGLE_SUBJECT_TASKS = ["mmlu_high_school_geography", "mmlu_marketing"]
TASKS = ["mmlu", *SINGLE_SUBJECT_TASKS, "gsm8k"]
MMLU_LIMIT = 12
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
RED, GREEN = "rgba(183, 28, 28, 1)", "rgba(27, 94, 32, 1)"  # the CSS --red and --green


@dataclass
class ReportInputs:
    """A real document and its flips, plus what built them (for more documents)."""

    document: ResultDocument
    flips: dict[str, list[dict[str, Any]]]
    baseline: str
    candidates: list[str]
    store_path: Path
    run_document: ResultDocument


_BUILT: dict[str, ReportInputs] = {}


def build_report_inputs(
    tmp_path_factory: pytest.TempPathFactory, tokenizer: Any, data_dir: Path, random_model: Path
) -> ReportInputs:
    """Run the sweep once per test session; the Markdown tests reuse it."""
    key = str(tmp_path_factory.getbasetemp())
    if key not in _BUILT:
        _BUILT[key] = _build(tmp_path_factory.mktemp("report"), tokenizer, data_dir, random_model)
    return _BUILT[key]


def _build(root: Path, tokenizer: Any, data_dir: Path, random_model: Path) -> ReportInputs:
    from evalsweep.comparison import compare_results, find_flips
    from evalsweep.engine import SweepSpec, run_sweep, stored_sweep
    from evalsweep.models import BackendOptions
    from evalsweep.report import document_json, results_document
    from evalsweep.store import Store
    from evalsweep.tasks.mmlu import MMLU

    data = _letter_data(root / "data", data_dir)
    references = [
        str(_letter_model(root, tokenizer, "A")),
        str(_letter_model(root, tokenizer, "B")),
        str(shutil.copytree(random_model, root / "random")),  # beside the others: short labels
    ]
    options = BackendOptions(device="cpu", dtype="float32")
    store_path = root / "results.sqlite"
    with Store(store_path) as store:
        mmlu = SweepSpec(
            checkpoints=references,
            tasks=[MMLU(subjects=list(SUBJECTS)), *SINGLE_SUBJECT_TASKS],
            data_dir=str(data),
            limit=MMLU_LIMIT,
            num_fewshot=1,
            options=options,
        )
        run = run_sweep(mmlu, store)
        run_document = results_document(run, ["evalsweep", "run"], compare_results(run))
        # as `evalsweep run` does, for `serve`
        store.save_run(run.run_id, document_json(run_document, indent=None))
        gsm8k = SweepSpec(
            checkpoints=references,
            tasks=["gsm8k"],
            data_dir=str(data),
            limit=1,
            num_fewshot=0,
            options=options,
        )
        run_sweep(gsm8k, store)
        result = stored_sweep(store, references, TASKS)
    comparisons = compare_results(result)
    document = results_document(result, ["evalsweep", "report", *references], comparisons)
    flips = {c: [f.to_dict() for f in find_flips(result, references[0], c)] for c in references[1:]}
    return ReportInputs(document, flips, references[0], references[1:], store_path, run_document)


def _letter_data(out: Path, source: Path) -> Path:
    """Real MMLU rows: one subject answered only A, one only B, one as it comes; real GSM8K."""
    for split in ("dev", "test"):
        (out / "mmlu" / split).mkdir(parents=True)
    for subject, letter in SUBJECTS.items():
        shutil.copy(source / "mmlu" / "dev" / f"{subject}_dev.csv", out / "mmlu" / "dev")
        with (source / "mmlu" / "test" / f"{subject}_test.csv").open(newline="") as handle:
            rows = [r for r in csv.reader(handle) if letter is None or r[5] == letter]
        with (out / "mmlu" / "test" / f"{subject}_test.csv").open("w", newline="") as handle:
            csv.writer(handle).writerows(rows[:MMLU_LIMIT])
    shutil.copytree(source / "gsm8k", out / "gsm8k")
    return out


def _letter_model(root: Path, tokenizer: Any, letter: str) -> Path:
    """A real GPT-2 that ranks " <letter>" first at every position."""
    import torch
    from transformers import GPT2LMHeadModel

    from evalsweep.demo import build_checkpoint

    path = build_checkpoint(root / f"always-{letter}", tokenizer, n_layer=1, width=32, n_head=2)
    model = GPT2LMHeadModel.from_pretrained(path)
    (token,) = tokenizer.encode(" " + letter)
    with torch.no_grad():
        model.transformer.ln_f.weight.zero_()
        model.transformer.ln_f.bias.copy_(model.transformer.wte.weight[token] * 50)
    model.save_pretrained(path, safe_serialization=True)
    return path


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tokenizer, data_dir, gpt2_a) -> ReportInputs:  # type: ignore[no-untyped-def]
    return build_report_inputs(tmp_path_factory, tokenizer, data_dir, gpt2_a)


@pytest.fixture(scope="module")
def report_file(inputs: ReportInputs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("html") / "report.html"
    write_html(path, inputs.document, inputs.flips)
    return path


# --- the browser ------------------------------------------------------------------------------


@dataclass
class Page:
    driver: Any
    console: list[dict[str, Any]]
    requests: list[str]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium with no name resolution: any network request fails (and is logged)."""
    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        chromium = None
    if not chromium or not chromedriver:
        pytest.fail(
            "the report tests need chromium, chromium-driver and selenium: .ci/deps-report.sh"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-default-apps",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def open_page(driver: Any, path: Path) -> Page:
    """Load a file, wait for Plotly to finish, and collect console messages and requests."""
    driver.get_log("performance")  # drop what earlier pages logged
    driver.get_log("browser")
    driver.get(path.as_uri())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        drawn = driver.execute_script(
            "const plots = document.querySelectorAll('.js-plotly-plot');"
            "return plots.length > 0 && [...plots].every(p => p._fullLayout && "
            "p.querySelector('svg.main-svg'));"
        )
        if drawn:
            break
        time.sleep(0.2)
    requests = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            requests.append(message["params"]["request"]["url"])
    return Page(driver, driver.get_log("browser"), requests)


@pytest.fixture(scope="module")
def page(browser: Any, report_file: Path) -> Page:
    return open_page(browser, report_file)


def visible_flip_rows(driver: Any) -> int:
    return int(
        driver.execute_script(
            "return [...document.querySelectorAll('#flips-table tbody tr')]"
            ".filter(r => r.offsetParent !== null).length;"
        )
    )


# --- tests ------------------------------------------------------------------------------------


def test_the_report_is_one_file_with_plotly_inlined_once(inputs: ReportInputs, report_file: Path):
    text = report_file.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert text.count("<script>/**\n* plotly.js v") == 1  # the library, inlined once
    # Nothing is fetched: no external script, stylesheet, image or frame. (plotly.js holds
    # map-tile URLs as strings; those are code, not requests, and the browser test checks
    # that none is made.)
    tags = re.findall(r"<(?:script|link|img|iframe)\b[^>]*>", text)
    assert [t for t in tags if re.search(r"\b(?:src|href)=", t)] == []
    # The result document travels inside the file, intact.
    start = text.index("id='evalsweep-document'>") + len("id='evalsweep-document'>")
    embedded = json.loads(text[start : text.index("</script>", start)])
    assert embedded["schema_version"] == SCHEMA_VERSION
    assert parse_document(json.dumps(embedded), "embedded") == inputs.document


def test_page_opens_offline_with_no_console_error_and_no_request(page: Page, report_file: Path):
    errors = [m for m in page.console if m["level"] in ("SEVERE", "ERROR")]
    assert errors == []
    outside = [u for u in page.requests if not u.startswith(("file:", "data:", "blob:"))]
    assert outside == []
    assert page.requests and page.requests[0] == report_file.as_uri()
    resources = page.driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
        ".filter(n => !n.startsWith('data:') && !n.startsWith('blob:'));"
    )
    assert resources == []


def test_forest_plot_draws_one_point_per_comparison(inputs: ReportInputs, page: Page):
    points = page.driver.execute_script(
        "return document.querySelectorAll('#forest-plot .scatterlayer .point').length;"
    )
    assert points == len(inputs.document.comparisons)
    significant = page.driver.execute_script(
        "return [...document.querySelectorAll('#forest-plot .scatterlayer .point')]"
        ".map(p => p.style.fill);"
    )
    verdicts = [c.verdict for c in inputs.document.comparisons]
    assert significant.count("rgb(198, 40, 40)") == verdicts.count("regression") >= 2
    assert significant.count("rgb(46, 125, 50)") == verdicts.count("improvement") >= 2
    labels = page.driver.execute_script(
        "return [...document.querySelectorAll('#forest-plot .ytick text')].map(t => t.textContent);"
    )
    assert "mmlu / high_school_geography" in labels
    assert "mmlu / marketing" in labels


def test_heatmap_has_a_cell_per_subject_and_checkpoint(inputs: ReportInputs, page: Page):
    driver = page.driver
    assert driver.execute_script("return !!document.querySelector('#heatmap-mmlu .hm image');")
    texts = driver.execute_script(
        "return [...document.querySelectorAll('#heatmap-mmlu .heatmap-label text')]"
        ".map(t => t.textContent);"
    )
    assert len(texts) == len(SUBJECTS) * 3
    assert "0.00 ▼" in texts and "1.00 ▲" in texts
    ticks = driver.execute_script(
        "return [...document.querySelectorAll('#heatmap-mmlu .ytick text, "
        "#heatmap-mmlu .ytick2 text')].map(t => t.textContent);"
    )
    assert set(SUBJECTS) <= set(ticks)
    assert {"social sciences", "other", "humanities"} <= set(ticks)  # MMLU categories


def test_table_colours_regressions_red_and_improvements_green(inputs: ReportInputs, page: Page):
    from selenium.webdriver.common.by import By

    cells = page.driver.find_elements(By.CSS_SELECTOR, "#results-table td[data-verdict]")
    by_verdict: dict[str, list[Any]] = {}
    for cell in cells:
        by_verdict.setdefault(cell.get_attribute("data-verdict"), []).append(cell)
    # The letter models' designed outcomes (always-B: every geography answer lost, every
    # marketing answer gained); the random checkpoint's verdicts are whatever it earns.
    assert any("Δ -100.0 points ▼" in cell.text for cell in by_verdict["regression"])
    assert any("Δ +100.0 points ▲" in cell.text for cell in by_verdict["improvement"])
    for cell in by_verdict["regression"]:
        assert cell.value_of_css_property("color") == RED and "▼" in cell.text
    for cell in by_verdict["improvement"]:
        assert cell.value_of_css_property("color") == GREEN and "▲" in cell.text
    headline = [c for c in inputs.document.comparisons if c.subject is None]
    assert len(cells) == len(headline)


def test_passk_section_says_there_is_none(page: Page):
    text = page.driver.execute_script("return document.getElementById('passk').innerText;")
    assert "No pass@k results" in text


def test_flip_filter_by_subject_task_direction_and_search(inputs: ReportInputs, page: Page):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver = page.driver
    rows = [(c, f) for c, listed in inputs.flips.items() for f in listed]
    assert visible_flip_rows(driver) == len(rows)
    assert driver.find_element(By.ID, "flip-count").text == str(len(rows))

    subject = Select(driver.find_element(By.ID, "filter-subject"))
    subject.select_by_value("marketing")
    expected = [r for r in rows if r[1]["subject"] == "marketing"]
    assert 0 < visible_flip_rows(driver) == len(expected) < len(rows)

    Select(driver.find_element(By.ID, "filter-task")).select_by_value("mmlu_marketing")
    expected = [r for r in expected if r[1]["task"] == "mmlu_marketing"]
    assert visible_flip_rows(driver) == len(expected) > 0
    assert driver.find_element(By.ID, "flip-count").text == str(len(expected))

    Select(driver.find_element(By.ID, "filter-direction")).select_by_value("regressed")
    expected = [r for r in expected if r[1]["direction"] == "regressed"]
    assert visible_flip_rows(driver) == len(expected)

    for key in ("subject", "task", "direction"):
        Select(driver.find_element(By.ID, f"filter-{key}")).select_by_value("")
    question = rows[0][1]["question"]
    search = driver.find_element(By.ID, "flip-search")
    search.send_keys(question[:40])
    expected = [r for r in rows if question[:40].lower() in r[1]["question"].lower()]
    assert visible_flip_rows(driver) == len(expected) >= 1
    search.clear()
    driver.execute_script(
        "document.getElementById('flip-search').dispatchEvent(new Event('input'))"
    )
    assert visible_flip_rows(driver) == len(rows)


def test_flip_rows_show_question_target_and_both_answers(inputs: ReportInputs, page: Page):
    candidate = inputs.candidates[0]
    flip = next(f for f in inputs.flips[candidate] if f["direction"] == "regressed")
    text = page.driver.execute_script(
        "return document.querySelector('#flips-table tbody tr').innerText;"
    )
    assert flip["question"][:60] in text
    assert flip["baseline_prediction"] == "A" and flip["candidate_prediction"] == "B"
    assert "\tA\tA\tB" in text  # target, baseline answer, candidate answer


def test_provenance_shows_identities_settings_versions_and_hardware(
    inputs: ReportInputs, page: Page
):
    text = page.driver.execute_script("return document.getElementById('provenance').innerText;")
    for entry in inputs.document.checkpoints:
        assert entry.checkpoint.identity in text
    for name, settings in inputs.document.settings.tasks.items():
        assert name in text and settings.settings_key in text
    environment = inputs.document.environment
    assert environment["versions"]["torch"] in text
    assert environment["hardware"]["cpu"] in text
    assert environment["python"] in text


def test_screenshot_of_the_whole_report(page: Page, report_file: Path):
    driver = page.driver
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1400, min(height + 40, 12000))
    time.sleep(0.5)  # let Plotly's responsive relayout settle
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report.png"
    assert driver.save_screenshot(str(shot))
    header = shot.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(header[16:20], "big") >= 1400
    shutil.copy(report_file, ARTIFACTS / "report.html")
    print(f"\nreport screenshot: {shot} (the page: {ARTIFACTS / 'report.html'})")
    driver.set_window_size(1400, 1000)


def test_passk_plot_when_results_have_pass_at_k(inputs: ReportInputs, browser: Any, tmp_path: Path):
    """pass@k rows as a code task reports them (unbiased estimator over real counts)."""
    from evalsweep.stats import pass_at_k

    counts = {inputs.baseline: [3, 0, 10, 1], inputs.candidates[0]: [5, 1, 10, 0]}
    rows = []
    for checkpoint, passed in counts.items():
        for k in (1, 5, 10):
            values = [pass_at_k(10, c, k) for c in passed]
            mean = sum(values) / len(values)
            spread = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
            rows.append(
                ResultRow(
                    checkpoint=checkpoint,
                    identity="",
                    task="humaneval",
                    metric=f"pass@{k}",
                    level="task",
                    group=None,
                    value=mean,
                    stderr=spread / len(values) ** 0.5,
                    n=len(values),
                )
            )
    document = dataclasses.replace(inputs.document, results=[*inputs.document.results, *rows])
    path = tmp_path / "passk.html"
    write_html(path, document, inputs.flips)
    loaded = open_page(browser, path)
    assert [m for m in loaded.console if m["level"] == "SEVERE"] == []
    traces = loaded.driver.execute_script(
        "const p = document.getElementById('passk-humaneval');"
        "return p.data.map(t => [t.name, t.x, t.y.length]);"
    )
    assert [t[1] for t in traces] == [["pass@1", "pass@5", "pass@10"]] * 2
    assert len(traces) == 2
    drawn = loaded.driver.execute_script(
        "return document.querySelectorAll('#passk-humaneval .scatterlayer .point').length;"
    )
    assert drawn == 6


def test_single_checkpoint_report_has_no_comparisons_but_renders(inputs: ReportInputs):
    from evalsweep.engine import stored_sweep
    from evalsweep.report import results_document
    from evalsweep.store import Store

    with Store(inputs.store_path) as store:
        alone = stored_sweep(store, [inputs.baseline], TASKS)
    text = render_html(results_document(alone), {})
    assert "nothing to compare" in text
    assert "Flips need at least two checkpoints" in text
    assert "data-verdict" not in text
    assert 'id="heatmap-mmlu"' in text  # per-subject scores still drawn


def test_run_document_shows_runtime_and_sandbox_layers(inputs: ReportInputs):
    sandbox = {
        "layers": {"seccomp": [True, "filter installed"], "netns": [False, "no privilege"]},
        "workers": 2,
    }
    document = dataclasses.replace(
        inputs.run_document,
        environment={**inputs.run_document.environment, "sandbox": sandbox},
        compute={"spend": {"usd": 0.0, "gpu_hours": 0.0}},
    )
    text = render_html(document, {})
    assert "GPT2LMHeadModel" in text  # runtime of a checkpoint loaded by the run
    assert "Sandbox layers" in text and "seccomp" in text and "no privilege" in text
    assert "gpu_hours" in text


def test_write_html_replaces_atomically(inputs: ReportInputs, tmp_path: Path):
    path = tmp_path / "out" / "report.html"
    write_html(path, inputs.document, {})
    first = path.read_text(encoding="utf-8")
    write_html(path, inputs.document, inputs.flips)
    assert path.read_text(encoding="utf-8") != first
    assert sorted(p.name for p in path.parent.iterdir()) == ["report.html"]


def test_generative_flip_shows_both_responses_and_folds_long_ones(
    inputs: ReportInputs, data_dir: Path
):
    """GSM8K flips carry whole responses; the extracted answers lead, long text folds away."""
    line = (data_dir / "gsm8k" / "test.jsonl").read_text(encoding="utf-8").splitlines()[0]
    problem = json.loads(line)
    target = problem["answer"].rsplit("####", 1)[1].strip()
    flip = {
        "task": "gsm8k",
        "subject": None,
        "doc_id": 0,
        "direction": "fixed",
        "question": problem["question"],
        "target": target,
        "baseline_prediction": "[invalid]",
        "candidate_prediction": target,
        "baseline_response": " A" * 256,
        "candidate_response": problem["answer"],
    }
    text = render_html(inputs.document, {inputs.candidates[0]: [flip]})
    row = text[
        text.index("<tr data-candidate=") : text.index("</tr>", text.index("<tr data-candidate="))
    ]
    assert "data-task='gsm8k'" in row and "data-direction='fixed'" in row
    assert f"<b>{target}</b>" in row and "<b>[invalid]</b>" in row
    assert "<details><summary>" in row  # the 512-character response is folded
    assert "answer wrong" in row and "answer right" in row


def test_serve_lists_stored_runs_and_renders_each_on_loopback(inputs: ReportInputs):
    import threading
    import urllib.error
    import urllib.request

    from evalsweep.errors import EvalsweepError
    from evalsweep.report._serve import make_server

    with pytest.raises(EvalsweepError, match="loopback"):
        make_server(inputs.store_path, host="0.0.0.0", port=0)
    server = make_server(inputs.store_path, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"

    def get(path: str) -> tuple[int, str, str]:
        try:
            with urllib.request.urlopen(base + path, timeout=60) as response:
                body = response.read().decode()
                return response.status, response.headers["Content-Type"], body
        except urllib.error.HTTPError as error:
            return error.code, error.headers["Content-Type"], error.read().decode()

    try:
        run_id = inputs.run_document.run_id
        status, kind, index = get("/")
        assert status == 200 and kind.startswith("text/html")
        assert f"href='/runs/{run_id}'" in index and "always-B" in index
        status, kind, page = get(f"/runs/{run_id}")
        assert status == 200 and "<title>evalsweep report" in page
        assert "GPT2LMHeadModel" in page  # the run's own document, with runtime
        assert "<tr data-candidate=" in page  # flips rebuilt from the stored rows
        status, kind, text = get(f"/runs/{run_id}.md")
        assert status == 200 and kind.startswith("text/markdown") and "| checkpoint |" in text
        status, _, text = get(f"/runs/{run_id}.json")
        assert status == 200 and json.loads(text)["run_id"] == run_id
        assert get("/runs/no-such-run")[0] == 404
        assert get("/elsewhere")[0] == 404
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


# --- a training run's trend -------------------------------------------------------------------


@pytest.fixture(scope="module")
def trend_file(tmp_path_factory: pytest.TempPathFactory, tokenizer: Any, data_dir: Path) -> Path:
    """``evalsweep run`` then ``evalsweep report --html`` on a run folder whose second step
    answers B everywhere on questions whose answer is always A (a certain regression,
    then a certain recovery at step 3, then no change at step 4)."""
    from conftest import run_cli

    root = tmp_path_factory.mktemp("trend")
    data = _letter_data(root / "data", data_dir)
    always_a, always_b = _letter_model(root, tokenizer, "A"), _letter_model(root, tokenizer, "B")
    run = root / "run"
    for step, model in ((1000, always_a), (2000, always_b), (3000, always_a), (4000, always_a)):
        shutil.copytree(model, run / f"step-{step}")
    store, page = root / "results.sqlite", root / "trend.html"
    task = ["--tasks", "mmlu_high_school_geography", "--store", store]
    run_cli(["run", run, *task, "--data-dir", data, "--limit", MMLU_LIMIT, "--num-fewshot", 1,
             "--device", "cpu", "--dtype", "float32"], check=True)  # fmt: skip
    run_cli(["report", run, *task, "--html", page], check=True)
    return page


def test_trend_chart_marks_what_the_paired_tests_say(browser: Any, trend_file: Path) -> None:
    page = open_page(browser, trend_file)
    assert [m for m in page.console if m["level"] in ("SEVERE", "ERROR")] == []
    traces = page.driver.execute_script(
        "const plot = document.getElementById('trend-plot-0');"
        "return plot.data.map(t => [t.name, t.x, t.y]);"
    )
    marks = {name: x for name, x, _ in traces}
    assert marks["score"] == [1000, 2000, 3000, 4000]
    assert [y for name, _, y in traces if name == "score"] == [[1.0, 0.0, 1.0, 1.0]]
    assert marks["▼ regression since the checkpoint before"] == [2000]
    assert marks["▲ improvement since the checkpoint before"] == [3000]
    assert marks["▽ worse than the baseline"] == [2000]
    assert "△ better than the baseline" not in marks
    assert marks["★ best score"] == [1000]
    drawn = page.driver.execute_script(
        "return document.querySelectorAll('#trend-plot-0 .scatterlayer .point').length;"
    )
    assert drawn >= 4 + 3 + 1  # the line's points, the three marks, the star
    evidence = page.driver.execute_script(
        "return document.querySelector('#trend .evidence').textContent;"
    )
    # The best checkpoint is named with its paired tests against each other one: better
    # than the one it beat, not shown better than the ones it ties with.
    assert evidence.startswith("best by mmlu_high_school_geography: step-1000"), evidence
    assert ": better than step-2000 (+100.0 points" in evidence, evidence
    assert "not shown better than step-3000 (+0.0 points" in evidence, evidence
    assert page.driver.execute_script("return !document.querySelector('#forest');")
    page.driver.set_window_size(1400, 900)
    time.sleep(0.5)
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "trend.png"
    assert page.driver.save_screenshot(str(shot))
    shutil.copy(trend_file, ARTIFACTS / "trend.html")
    print(f"\ntrend screenshot: {shot}")
    page.driver.set_window_size(1400, 1000)
