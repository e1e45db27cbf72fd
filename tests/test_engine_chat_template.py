"""``--apply-chat-template`` and ``--fewshot-as-multiturn``, against lm-eval's own rendering.

The checkpoint is a real tiny GPT-2 whose tokenizer is given a chat template
here; the reference prompts come from lm-eval 0.4.13's ``fewshot_context``
on its own ``arc_easy`` YAML (pointed at the local files) with that tokenizer.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import run_cli
from evalsweep.engine._chat import multi_turn, single_turn, with_system_instruction
from evalsweep.store import Store
from evalsweep.tasks import DataSource, get_task
from evalsweep.tasks.arc import ai2_rows_in_hub_schema

TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SYSTEM = "You are a careful science teacher."


@pytest.fixture(scope="module")
def chat_checkpoint(tmp_path_factory: pytest.TempPathFactory, gpt2_a: Path) -> Path:
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("chat") / "gpt2-chat"
    shutil.copytree(gpt2_a, folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(folder)
    return folder


def lm_eval_arc_task(data_dir: Path, folder: Path) -> Any:
    """lm-eval's own arc_easy task object reading the local Test and Dev files."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    config = yaml.safe_load(
        (Path(lm_eval.__file__).parent / "tasks" / "arc" / "arc_easy.yaml").read_text()
    )
    files = {}
    for split, local in (("test", "Test"), ("validation", "Dev")):
        source = data_dir / "arc" / "ARC-Easy" / f"ARC-Easy-{local}.jsonl"
        rows = ai2_rows_in_hub_schema(source)
        path = folder / f"{split}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        files[split] = str(path)
    config.update(
        task="chat_arc_easy",
        tag=["chat_tests"],
        dataset_path="json",
        dataset_kwargs={"data_files": files},
        training_split=None,
    )
    config.pop("dataset_name")
    (folder / "chat_arc_easy.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    manager = TaskManager(include_path=str(folder), include_defaults=False)
    task = manager.load(["chat_arc_easy"])["tasks"]["chat_arc_easy"]
    task.set_fewshot_seed(1234)
    return task


def test_single_and_multi_turn_messages_are_lm_eval_s(data_dir: Path) -> None:
    from lm_eval.api.utils import Message, multiturn_to_singleturn

    task = get_task("mmlu_anatomy")
    item = task.prepare(task.load(DataSource(str(data_dir)), 1), 3)[0]
    assert item.chat is not None
    turns = with_system_instruction(item.chat.turns, SYSTEM)
    messages = [Message(t.role, t.content, t.delimiter) for t in turns]
    assert multi_turn(turns) == [m.to_dict() for m in messages]
    assert single_turn(turns) == multiturn_to_singleturn(messages)
    assert single_turn(turns)[0]["content"].startswith(SYSTEM + "\n\nThe following are")


@pytest.mark.slow
@pytest.mark.parametrize("multiturn", [True, False])
def test_rendered_prompts_and_continuations_equal_lm_eval(
    multiturn: bool,
    chat_checkpoint: Path,
    data_dir: Path,
    tmp_path: Path,
    cli_env: dict[str, str],
) -> None:
    from transformers import AutoTokenizer

    store = tmp_path / "s.db"
    done = run_cli(
        ["run", str(chat_checkpoint), "--tasks", "arc_easy",
         "--limit", "3", "--num-fewshot", "2", "--data-dir", str(data_dir), "--device", "cpu",
         "--apply-chat-template", "--system-instruction", SYSTEM, "--store", str(store),
         "--out", str(tmp_path / "out"),
         "--fewshot-as-multiturn" if multiturn else "--no-fewshot-as-multiturn"],
        env=cli_env, )  # fmt: skip
    assert done.returncode == 0, done.stderr
    samples = [json.loads(x) for x in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    with Store(store) as opened:
        stored = {record.doc_id: record.requests for record in opened.records()}

    tokenizer = AutoTokenizer.from_pretrained(chat_checkpoint)

    def chat_template(messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return str(
            tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                continue_final_message=not add_generation_prompt,
            )
        )  # fmt: skip

    reference = lm_eval_arc_task(data_dir, tmp_path)
    docs = list(reference.eval_docs)[:3]
    assert len(samples) == 3
    for doc, sample in zip(docs, samples, strict=True):
        prompt = reference.fewshot_context(
            doc, 2, system_instruction=SYSTEM, apply_chat_template=True,
            fewshot_as_multiturn=multiturn, chat_template=chat_template,
        )  # fmt: skip
        assert sample["prompt"] == prompt
        assert prompt.startswith(f"<|system|>\n{SYSTEM}<|end|>")
        assert prompt.count("<|assistant|>") == (3 if multiturn else 1)
        instances = reference.construct_requests(doc, prompt, apply_chat_template=True)
        expected = [instance.args for instance in instances]
        mine = [(r["context"], r["continuation"]) for r in stored[sample["doc_id"]]]
        assert mine == [tuple(args) for args in expected]
        assert not mine[0][1].startswith(" ")  # lm-eval drops the target delimiter


def test_checkpoint_without_chat_template_is_a_one_line_error(
    gpt2_a: Path, data_dir: Path, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    done = run_cli(
        ["run", str(gpt2_a), "--tasks", "arc_easy", "--limit",
         "1", "--data-dir", str(data_dir), "--apply-chat-template", "--store",
         str(tmp_path / "s.db")],
        env=cli_env, )  # fmt: skip
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "has no chat template" in lines[0] and str(gpt2_a) in lines[0]


def test_fewshot_as_multiturn_needs_a_chat_template(
    gpt2_a: Path, data_dir: Path, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    done = run_cli(
        ["run", str(gpt2_a), "--tasks", "arc_easy",
         "--data-dir", str(data_dir), "--fewshot-as-multiturn", "--store", str(tmp_path / "s.db")],
        env=cli_env, )  # fmt: skip
    assert done.returncode == 2
    assert "--fewshot-as-multiturn needs --apply-chat-template" in done.stderr


@pytest.mark.slow
def test_system_instruction_without_template_is_plain_text_as_lm_eval(
    gpt2_a: Path, data_dir: Path, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    store = tmp_path / "s.db"
    done = run_cli(
        ["run", str(gpt2_a), "--tasks", "arc_easy", "--limit",
         "2", "--num-fewshot", "1", "--data-dir", str(data_dir), "--device", "cpu",
         "--system-instruction", SYSTEM, "--store", str(store), "--out", str(tmp_path / "out")],
        env=cli_env, )  # fmt: skip
    assert done.returncode == 0, done.stderr
    samples = [json.loads(x) for x in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    reference = lm_eval_arc_task(data_dir, tmp_path)
    for doc, sample in zip(list(reference.eval_docs)[:2], samples, strict=True):
        prompt = reference.fewshot_context(doc, 1, system_instruction=SYSTEM)
        assert sample["prompt"] == prompt and prompt.startswith(SYSTEM + "Question: ")
