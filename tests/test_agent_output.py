"""What reaches the chat, over a real stdio MCP client: sizes as sent, pages, redaction,
progress while a job runs, and the estimate against the actual time.

One real job runs on tiny checkpoints; its log then gets what a hostile or
unlucky job could print (emoji, control characters, a secret the job did not
know about) and is read back page by page.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from evalsweep.store import Store
from evalsweep.text import visible

TASK = "mmlu_abstract_algebra"
CAP = 17_000


def sent(call: Any) -> int:
    """Bytes of a tool result as it came over the wire (all content blocks, structured too)."""
    return len(call.model_dump_json(by_alias=True, exclude_none=True).encode())


def ok(call: Any) -> dict[str, Any]:
    assert not call.is_error, call.content[0].text
    return dict(call.structured_content)


def server(store_path: Path, env: dict[str, str], cap: int) -> StdioServerParameters:
    config = Path(env["EVALSWEEP_CONFIG"])
    config.write_text(f"[limits]\nmax_result_bytes = {cap}\n")
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "evalsweep", "mcp", "--store", str(store_path)],
        env=env,
    )


async def read_log(client: Client, job_id: str, max_bytes: int, offset: int = 0) -> list[str]:
    pages = []
    while True:
        call = await client.call_tool(
            "job_logs", {"job_id": job_id, "offset": offset, "max_bytes": max_bytes}
        )
        assert sent(call) <= CAP, sent(call)
        page = ok(call)
        assert page["text"] or page["eof"]
        pages.append(page["text"])
        offset = page["next_offset"]
        if page["eof"]:
            return pages


@pytest.mark.slow
@pytest.mark.anyio
async def test_results_fit_the_cap_as_sent_logs_page_safely_and_progress_shows(
    tmp_path: Path, store_path: Path, cli_env: dict[str, str], data_dir: Path,
    gpt2_a: Path, gpt2_b: Path,
) -> None:  # fmt: skip
    config = tmp_path / "config" / "config.toml"
    config.parent.mkdir()
    env = {
        **cli_env,
        "EVALSWEEP_CONFIG": str(config),
        "EVALSWEEP_DATA_DIR": str(data_dir),
        # Progress reaches the store and the log at every step the run reports, so what a
        # poll can see does not depend on how fast this machine scores.
        "EVALSWEEP_PROGRESS_INTERVAL": "0",
    }
    key = "sk-" + secrets.token_hex(16)
    config.write_text("")
    subprocess.run(
        [sys.executable, "-m", "evalsweep", "secrets", "set", "OPENAI_API_KEY"],
        input=key + "\n", text=True, env=env, check=True, capture_output=True,
    )  # fmt: skip
    params = server(store_path, env, CAP)
    async with Client(params, read_timeout_seconds=120) as client:
        args = {"checkpoints": [str(gpt2_a), str(gpt2_b)], "tasks": [TASK], "limit": 100}
        quote = ok(await client.call_tool("quote_sweep", args))
        job_id = ok(await client.call_tool("start_sweep", {"quote_id": quote["quote_id"]}))[
            "job_id"
        ]
        seen_running = []
        with anyio.fail_after(400):
            while (status := ok(await client.call_tool("job_status", {"job_id": job_id})))[
                "status"
            ] == "running":
                seen_running.append(status)
                await anyio.sleep(0.1)
        assert status["status"] == "finished", status
        # Progress while it ran, as job_status showed it: documents done per (checkpoint, task),
        # never more than the total and never going back.
        assert seen_running, "the job was never seen running"
        for before, after in zip(seen_running, seen_running[1:], strict=False):
            done = {(p["checkpoint"], p["task"]): p["documents_done"] for p in before["progress"]}
            for part in after["progress"]:
                assert part["checkpoint"] in {str(gpt2_a), str(gpt2_b)}
                assert 0 <= part["documents_done"] <= part["documents_total"] == 100
                assert part["documents_done"] >= done.get((part["checkpoint"], part["task"]), 0)
        assert [p["documents_done"] for p in status["progress"]] == [100, 100]
        # The estimate and the actual time, recorded and shown.
        assert status["estimated_s"] == pytest.approx(quote["estimated_seconds"], abs=0.1)
        assert status["actual_s"] == pytest.approx(status["elapsed_s"], abs=0.1)

        log_path = store_path.parent / "evalsweep-jobs" / job_id / "log.txt"
        log = log_path.read_text()
        assert f"estimated {quote['estimated_seconds']:.1f}" in log
        # The supervisor wrote progress to the store before the parts ended (a part reaches the
        # store's results only at its end): each such write is a log line, some of them partial.
        counts = [
            (int(done), int(total))
            for line in log.split("\n") if line.startswith("evalsweep: progress: ")
            for done, total in re.findall(r" (\d+)/(\d+) requests", line)
        ]  # fmt: skip
        assert any(0 < done < total for done, total in counts), log
        # What a job could print: a secret it did not know, emoji, control characters.
        with log_path.open("a") as handle:
            handle.write(f"token {key} end\n" + "\U0001f600" * 6000 + "\n" + "\x01" * 9000)
            handle.write(f"\n{key}{key}\nlast line\n")
        full = log_path.read_text().replace(key, "[secret OPENAI_API_KEY]")

        # Pages are shown as a person may be shown them: control characters escaped.
        default_pages = await read_log(client, job_id, 20_000)
        assert "".join(default_pages) == visible(full, newlines=True)
        assert "\x01" not in "".join(default_pages) and "\\x01" in default_pages[-1]
        for size in (17, 5, 40):
            pages = await read_log(client, job_id, size, offset=len(log.encode()) - 10)
            text = "".join(pages)
            rest = full.encode()[len(log.encode()) - 10 :].decode()
            assert text == visible(rest, newlines=True)
            for page in pages:  # no page holds a piece of the key
                assert not any(key[i : i + 6] in page for i in range(len(key) - 5)), page
        start = log_path.read_bytes().index(key.encode())
        inside = ok(await client.call_tool("job_logs", {"job_id": job_id, "offset": start + 5}))
        assert inside["text"].startswith("[secret OPENAI_API_KEY] end")
        for bad in (0, -1):
            call = await client.call_tool("job_logs", {"job_id": job_id, "max_bytes": bad})
            assert call.is_error and call.content[0].text == (
                "job_logs: max_bytes must be 1 or more"
            )

        huge = "q-" + "a" * 3_000_000
        call = await client.call_tool("start_sweep", {"quote_id": huge})
        assert call.is_error and sent(call) <= CAP and len(call.content) == 1

        table = ok(await client.call_tool("results_table", {"job_id": job_id}))
        assert table["next_offset"] is None
    with Store(store_path) as store:
        audited = store.audit_entries(kind="refusal")
    assert audited and all(len(e["text"]) < 500 for e in audited)
    # What a refused call received is kept exactly, up to 65,536 characters (the count of
    # the rest beside it).
    assert all(len(e["detail"]["received"]) <= 65_536 for e in audited)
    cut = [e["detail"] for e in audited if "received_chars" in e["detail"]]
    assert [d["received_chars"] for d in cut] == [len(json.dumps({"quote_id": huge}))]

    async with Client(server(store_path, env, 3000), read_timeout_seconds=120) as small:
        pages, offset = [], 0
        while offset is not None:
            call = await small.call_tool("results_table", {"job_id": job_id, "offset": offset})
            assert sent(call) <= 3000
            pages.append(ok(call))
            offset = pages[-1]["next_offset"]
    assert len(pages) > 1
    assert "".join(p["text"] for p in pages) == table["text"]
    assert [r for p in pages for r in p["results"]] == table["results"]
    assert [c for p in pages for c in p["comparisons"]] == table["comparisons"]


def finished_job(store: Store, box: Any, tmp_path: Path, log: Path) -> Any:
    """A finished job 'j-0000000000' whose log is ``log``, and the jobs that know it."""
    from evalsweep.agent._jobs import Jobs
    from evalsweep.agent._settings import AgentSettings

    jobs = Jobs(store, AgentSettings(), box, tmp_path / "jobs")
    with store.connection:
        store.connection.execute(
            "INSERT INTO agent_jobs (job_id, quote_id, connection, target, params, plan, "
            "argv, out_dir, log_path, status, started, deadline, work, loads) VALUES "
            "('j-0000000000', 'q', 'c', 'local', '{}', '[]', '', '', ?, 'finished', 0, 0, 0, 0)",
            (str(log),),
        )
    return jobs


def test_log_pages_never_split_a_character_or_a_secret(tmp_path: Path) -> None:
    """Every page size, every start: pages join into the redacted log, none holds a piece
    of a secret or half a character (including a secret the job did not know about)."""
    from evalsweep.secrets import SecretBox

    box = SecretBox(tmp_path / "config")
    box.set("KEY", "secretvalue123")
    log = tmp_path / "log.txt"
    content = "┃ a ┃ é \U0001f600\n" * 5 + "x secretvalue123 y secretvalue123secretvalue123\n"
    log.write_text(content + "┃" * 20 + "secretvalue123")
    log.chmod(0o600)  # as the server creates a job's log
    expected = log.read_text().replace("secretvalue123", "[secret KEY]")
    with Store(tmp_path / "s.sqlite") as store:
        jobs = finished_job(store, box, tmp_path, log)
        for size in range(1, 40):
            offset, pages = 0, []
            while True:
                text, offset, total = jobs.logs("j-0000000000", offset, size)
                assert "\ufffd" not in text and "value1" not in text, (size, text)
                pages.append(text)
                if offset >= total:
                    break
            assert "".join(pages) == expected, size
        start = log.read_bytes().index(b"secretvalue123")
        for inside in range(1, 14):  # a page that starts inside a value starts with its mask
            text, _, _ = jobs.logs("j-0000000000", start + inside, 5)
            assert text.startswith("[secret KEY]") and "value" not in text, (inside, text)


def test_log_pages_and_the_last_line_never_show_a_piece_of_any_form_of_a_secret(
    tmp_path: Path,
) -> None:
    """A form of a value other than the value itself (JSON's ``\\/``, URL-encoding) is one
    the pages keep whole too; and the last line is masked before it is cut, so its first
    characters are never the end of a value."""
    from evalsweep.agent._jobs import _last_line
    from evalsweep.secrets import SecretBox

    box = SecretBox(tmp_path / "config")
    box.set("KEY", "late/value+123")
    log = tmp_path / "log.txt"
    forms = ['"late\\/value+123"', "late%2Fvalue%2B123", "late%2fvalue%2b123", "late/value+123"]
    log.write_text("".join(f"x {form} y\n" for form in forms))
    log.chmod(0o600)  # as the server creates a job's log
    with Store(tmp_path / "s.sqlite") as store:
        jobs = finished_job(store, box, tmp_path, log)
        for size in range(1, 30):
            offset, pages = 0, []
            while True:
                text, offset, total = jobs.logs("j-0000000000", offset, size)
                assert "value" not in text and "123" not in text, (size, text)
                pages.append(text)
                if offset >= total:
                    break
            assert "".join(pages).count("[secret KEY]") == len(forms), size
    for before in range(0, 4200, 7):  # the value at every place around the tail's window
        log.write_text("z" * before + "late/value+123" + "w" * 480 + "\n")
        line = _last_line(log, box)
        assert "value" not in line and "123" not in line and "late" not in line, before
        assert line.endswith("w" * 480)


def test_a_log_someone_else_could_place_is_never_read(tmp_path: Path) -> None:
    """The jobs folder and the job's folder must be private, and the log the user's own
    regular file: a link planted as the log (to the secrets, say) is refused, not read."""
    from evalsweep.agent._jobs import JobError, _last_line, _open_log
    from evalsweep.secrets import SecretBox

    box = SecretBox(tmp_path / "config")
    box.set("KEY", "secretvalue123")
    job = tmp_path / "jobs" / "j-0000000000"
    job.mkdir(parents=True, mode=0o700)
    (job / "log.txt").symlink_to(box.key_path)
    with pytest.raises(JobError, match="log.txt cannot be opened"):
        _open_log(job / "log.txt", os.O_RDONLY)
    assert _last_line(job / "log.txt", box) == ""
    (job / "log.txt").unlink()
    (job / "log.txt").write_text("fine\n")
    (job / "log.txt").chmod(0o600)
    assert _last_line(job / "log.txt", box) == "fine"
    (tmp_path / "jobs").chmod(0o777)  # anyone could swap the job's folder
    with pytest.raises(JobError, match="others can write to it"):
        _open_log(job / "log.txt", os.O_RDONLY)
