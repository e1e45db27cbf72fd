"""How good is a quote's time estimate? Measures throughput for ``[throughput]`` defaults.

Builds a random-weight GPT-2 of about 30M parameters (speed does not depend on
what the weights learned), quotes a sweep the way ``quote_sweep`` does, runs it
as a job runs (``python -m evalsweep run`` in a subprocess) and prints the
measured throughput in the estimator's unit (tokens per second of a
1-billion-parameter model) and the ratio of the estimate to the real time.

    python benchmarks/agent_estimate.py --limit 20 --tasks mmlu_abstract_algebra,gsm8k
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from evalsweep.agent._estimate import (
    estimated_seconds,
    overhead_seconds,
    plan_work,
    remaining_work,
    throughput,
)
from evalsweep.agent._options import quoted_spec
from evalsweep.agent._settings import AgentSettings
from evalsweep.demo import build_checkpoint, build_tokenizer, corpus_from_data_dir
from evalsweep.options import to_argv
from evalsweep.store import Store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=str(Path(__file__).parents[2] / "shared" / "data"))
    parser.add_argument("--tasks", default="mmlu_abstract_algebra")
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    args = parser.parse_args()
    data = Path(args.data_dir)
    settings = AgentSettings()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tokenizer = build_tokenizer(corpus_from_data_dir(data, max_lines=3000), vocab_size=4096)
        checkpoint = build_checkpoint(
            root / "model", tokenizer, n_layer=args.layers, width=args.width,
            n_head=8, max_positions=2048, architecture="gpt2", seed=0,
        )  # fmt: skip
        tasks = args.tasks.split(",")
        quoted = {"limit": args.limit, "num_fewshot": None, "device": "cpu"}
        work = plan_work([str(checkpoint)], tasks, data_dir=str(data), **quoted)
        store_path = root / "store.sqlite"
        with Store(store_path) as store:
            todo, loads = remaining_work(store, work.plan)
            tps, source = throughput(store, settings, "local", "cpu")
        estimate = estimated_seconds(todo, loads, tps, settings)
        # The quoted sweep, written as a job writes it.
        params = {"checkpoints": [str(checkpoint)], "tasks": tasks, "data_dir": str(data)}
        sweep = to_argv(quoted_spec({**params, **quoted}))
        command = [sys.executable, "-m", "evalsweep", "run", "--store", str(store_path), "--json"]
        command += sweep
        began = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - began
    parameters = work.plan[0]["parameters"]
    compute = max(seconds - overhead_seconds(settings, loads), 1.0)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"model: random GPT-2, {parameters / 1e6:.1f}M parameters; tasks {args.tasks}")
    print(f"work: {work.requests} requests, {work.tokens} tokens (chars/4 + max generated)")
    print(f"estimate: {estimate:.1f} s with {tps:.0f} tokens/s ({source})")
    print(f"real: {seconds:.1f} s; estimate / real = {estimate / seconds:.2f}")
    print(f"measured throughput: {todo / compute:.1f} tokens/s of a 1B-parameter model")


if __name__ == "__main__":
    main()
