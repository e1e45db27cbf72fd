"""Data parallelism for the vLLM backend: one engine per replica, each in its own process.

vLLM refuses ``LLM(data_parallel_size>1)`` in a single process; lm-eval runs
one engine per replica in separate workers. Here each replica is a spawned
process holding a :class:`~evalsweep.models.vllm.VLLMBackend` on its own
slice of the visible GPUs (``--tensor-parallel-size`` GPUs each). Requests
are split into contiguous shards, because neighbouring requests share
few-shot prefixes and so keep each replica's prefix cache useful; answers
come back in request order. Errors a replica meets are re-raised here as the
same one-line user errors.

On vLLM's CPU build the replicas share one memory node, so they share its KV
cache budget explicitly: the KV cache of each is decided here, once, for all
of them (:func:`~evalsweep.models.vllm.kv_cache_bytes` with ``engines=N``),
and each replica is started with its own share as its ``--kv-cache-space``.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from evalsweep import errors
from evalsweep.checkpoints import ResolvedCheckpoint
from evalsweep.errors import BackendError, EvalsweepError
from evalsweep.models._base import BackendOptions, ProgressCallback
from evalsweep.models._tokens import first_line
from evalsweep.requests import GenerationRequest, LoglikelihoodRequest, LoglikelihoodResult


class VLLMReplicas:
    """``--data-parallel-size N`` vLLM engines answering shards of every call."""

    name = "vllm"

    def __init__(self, checkpoint: ResolvedCheckpoint, options: BackendOptions) -> None:
        count = options.data_parallel_size
        slices = _device_slices(count, options.tensor_parallel_size)
        context = multiprocessing.get_context("spawn")  # vLLM and CUDA do not survive fork
        from evalsweep.models.vllm import GiB, kv_cache_bytes

        share = kv_cache_bytes(checkpoint, options, engines=count)
        single = replace(options, data_parallel_size=1)
        if share is not None:  # bytes / GiB is exact in a float: each gets exactly its share
            single = replace(single, kv_cache_space=share / GiB)
        self._replicas: list[tuple[Any, Any]] = []
        for devices in slices:
            parent, child = context.Pipe()
            process = context.Process(
                target=_serve_replica, args=(child, checkpoint.to_dict(), single, devices)
            )
            process.start()
            child.close()
            self._replicas.append((process, parent))
        try:
            self._info: list[dict[str, Any]] = [self._receive(i) for i in range(count)]
        except BaseException:
            self.close()
            raise

    def settings(self) -> Mapping[str, object]:
        return dict(self._info[0]["settings"])

    def describe(self) -> Mapping[str, object]:
        info = dict(self._info[0]["describe"])
        info["data_parallel_size"] = len(self._replicas)
        return info

    def loglikelihood(
        self, requests: Sequence[LoglikelihoodRequest], progress: ProgressCallback | None = None
    ) -> list[LoglikelihoodResult]:
        return self._map("loglikelihood", requests, progress)

    def generate_until(
        self, requests: Sequence[GenerationRequest], progress: ProgressCallback | None = None
    ) -> list[str]:
        return self._map("generate_until", requests, progress)

    def close(self) -> None:
        for process, conn in self._replicas:
            if process.is_alive():
                with contextlib.suppress(BrokenPipeError, OSError):
                    conn.send(("close", None))
        for process, conn in self._replicas:
            process.join(timeout=120)
            if process.is_alive():
                process.terminate()
                process.join()
            conn.close()
        self._replicas = []

    def _map(self, method: str, requests: Sequence[Any], progress: ProgressCallback | None) -> Any:
        count = len(self._replicas)
        bounds = [len(requests) * i // count for i in range(count + 1)]
        for i, (_process, conn) in enumerate(self._replicas):
            conn.send((method, list(requests[bounds[i] : bounds[i + 1]])))
        answers: list[Any] = []
        for i in range(count):
            part = self._receive(i)
            answers.extend(part)
            if progress:
                progress(len(part))
        return answers

    def _receive(self, index: int) -> Any:
        process, conn = self._replicas[index]
        try:
            kind, value = conn.recv()
        except EOFError:
            process.join(timeout=10)
            raise BackendError(
                f"vLLM replica {index} exited unexpectedly (exit code {process.exitcode})"
            ) from None
        if kind == "error":
            name, message = value
            kind_of_error = getattr(errors, name, BackendError)
            raise kind_of_error(message)
        return value


def _device_slices(count: int, per_replica: int) -> list[list[str] | None]:
    """Each replica's GPUs (``CUDA_VISIBLE_DEVICES`` values), or None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return [None] * count
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    devices = (
        [d.strip() for d in visible.split(",") if d.strip()]
        if visible
        else [str(i) for i in range(torch.cuda.device_count())]
    )
    needed = count * per_replica
    if len(devices) < needed:
        raise BackendError(
            f"--data-parallel-size {count} x --tensor-parallel-size {per_replica} needs "
            f"{needed} GPUs; {len(devices)} visible"
        )
    return [devices[i * per_replica : (i + 1) * per_replica] for i in range(count)]


def _serve_replica(
    conn: Any, checkpoint: dict[str, Any], options: BackendOptions, devices: list[str] | None
) -> None:
    """A replica's process: load the engine, then answer calls until told to close."""
    if devices is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(devices)
    from evalsweep.models.vllm import VLLMBackend

    try:
        backend = VLLMBackend(ResolvedCheckpoint.from_dict(checkpoint), options)
    except EvalsweepError as exc:
        conn.send(("error", (type(exc).__name__, str(exc))))
        return
    except Exception as exc:
        message = f"a vLLM replica failed to start ({first_line(exc)})"
        conn.send(("error", ("BackendError", message)))
        return
    ready = {"settings": dict(backend.settings()), "describe": dict(backend.describe())}
    conn.send(("ready", ready))
    while True:
        try:
            method, payload = conn.recv()
        except EOFError:
            method, payload = "close", None
        if method == "close":
            backend.close()
            return
        try:
            conn.send(("ok", getattr(backend, method)(payload)))
        except EvalsweepError as exc:
            conn.send(("error", (type(exc).__name__, str(exc))))
        except Exception as exc:
            conn.send(("error", ("BackendError", f"a vLLM replica failed ({first_line(exc)})")))


__all__ = ["VLLMReplicas"]
