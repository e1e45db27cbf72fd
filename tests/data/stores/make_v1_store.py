"""Write ``v1.sqlite``: a results store as evalsweep's schema version 1 writes it.

Run with the code of that version on the path (``PYTHONPATH=<checkout>/src``) and
a data folder laid out like the originals; see README.md beside this file.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from evalsweep.agent._schema import ensure_agent_tables
from evalsweep.demo import build_checkpoint, build_tokenizer, corpus_from_data_dir
from evalsweep.engine import SweepSpec, run_sweep
from evalsweep.models import BackendOptions
from evalsweep.report import results_document
from evalsweep.store import Store
from evalsweep.tasks.mmlu import MMLU


def main(data_dir: Path, out: Path) -> None:
    out.unlink(missing_ok=True)
    # Built in a fresh folder and named relative to it (the data folder as a link there), so
    # the store names no folder of the machine it was made on.
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "data").symlink_to(data_dir.resolve())
        out = out.resolve()
        os.chdir(tmp)
        root, data_dir = Path(), Path("data")
        tokenizer = build_tokenizer(corpus_from_data_dir(data_dir, max_lines=300), vocab_size=300)
        checkpoints = [
            str(build_checkpoint(root / f"model-{seed}", tokenizer, n_layer=1, width=16,
                                 n_head=2, max_positions=1024, architecture="gpt2", seed=seed))
            for seed in (0, 1)
        ]  # fmt: skip
        spec = SweepSpec(
            checkpoints=checkpoints,
            tasks=[MMLU(subjects=["anatomy", "astronomy"]), "gsm8k"],
            data_dir=str(data_dir),
            limit=2,
            num_fewshot=1,
            options=BackendOptions(device="cpu", dtype="float32"),
        )
        with Store(out) as store:
            result = run_sweep(spec, store)
            store.save_run(result.run_id, results_document(result, ["evalsweep", "run"], []))
            store.audit_event("approval", "approved quote q1", target="local")
            ensure_agent_tables(store)
            store.connection.execute(
                "INSERT INTO agent_ledger VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                ("job:1", "job", "local", "local", 0.0, time.time(), None, 0.0),
            )
            store.connection.commit()
            # A local checkpoint's provenance records the folder it was found in: written
            # relative here, as the rest is.
            here = str(Path(tmp).resolve()) + os.sep
            for (table,) in store.connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
            ).fetchall():
                for column in store.connection.execute(f"PRAGMA table_info({table})"):
                    if column[2].upper() == "TEXT":
                        store.connection.execute(
                            f"UPDATE {table} SET {column[1]} = replace({column[1]}, ?, '')",
                            (here,),
                        )
            store.connection.commit()
    with sqlite3.connect(out) as conn:
        conn.execute("VACUUM")
    print(json.dumps({"rows": sum(1 for _ in Store(out).records())}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
