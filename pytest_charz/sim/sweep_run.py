"""Where a sweep's configurations run (:func:`run_configs`): in this process, in worker processes,
or on a Dask cluster, the points put back in grid order whatever ran where."""
from __future__ import annotations

import math
import signal
import threading
from typing import Mapping, Sequence

from ..errors import UsageError
from .sweep import Evaluate, Progress, SweepPoint

#: Most configurations a worker process is given at once.
MAX_CHUNK = 64
#: How long to wait for a Dask scheduler to answer before the sweep is a usage error.
DASK_CONNECT_TIMEOUT_S = 10


def _evaluate_chunk(evaluate: Evaluate, configs: Sequence[Mapping[str, float]]) -> list[SweepPoint]:
    return [evaluate(values) for values in configs]


def _ignore_interrupts() -> None:
    """A worker's initializer: Ctrl-C reaches the whole process group, and only the parent answers
    it (once, cancelling what is queued), never every worker with its own traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _hold_interrupts() -> bool:
    """Block SIGINT in this thread (the threads and processes it starts inherit the mask); whether
    it was blocked (only in the main thread, where ``signal.pthread_sigmask`` exists)."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        return False
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    return True


def _release_interrupts(held: bool) -> bool:
    """Unblock what :func:`_hold_interrupts` blocked (a Ctrl-C held meanwhile is raised now);
    False: nothing is held any more."""
    if held:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    return False


def _chunks(configs: Sequence[Mapping[str, float]], count: int) -> list[Sequence[Mapping[str, float]]]:
    size = max(1, math.ceil(len(configs) / max(1, count)))
    return [configs[i:i + size] for i in range(0, len(configs), size)]


def run_configs(configs: Sequence[Mapping[str, float]], evaluate: Evaluate, *, jobs: int = 1,
                progress: Progress | None = None, scheduler: str | None = None) -> tuple[SweepPoint, ...]:
    """Evaluate every configuration, in grid order whatever ran where.

    ``jobs`` > 1 runs chunks in that many worker processes; ``scheduler`` (a Dask scheduler
    address, ``tcp://host:8786``) runs them on that cluster instead (the ``sweep`` extra).
    ``progress`` is called with the number of configurations finished after each chunk. Worker
    processes ignore Ctrl-C; the parent's KeyboardInterrupt ends them and what is still queued.
    """
    if not isinstance(jobs, int) or jobs < 1:
        raise UsageError(f"jobs must be a positive integer, got {jobs!r}")
    if scheduler:
        return _run_dask(configs, evaluate, scheduler, progress)
    # Chunks of a few per worker: large enough that pickling the evaluator is amortised, small
    # enough that the progress bar moves, the last worker does not finish long after the rest,
    # and Ctrl-C waits for no more than one chunk per worker.
    chunks = _chunks(configs, max(jobs * 8, math.ceil(len(configs) / MAX_CHUNK)) if jobs > 1
                     else max(1, len(configs) // 50))
    points: list[SweepPoint] = []
    if jobs == 1:
        for chunk in chunks:
            points.extend(_evaluate_chunk(evaluate, chunk))
            if progress is not None:
                progress(len(points))
        return tuple(points)
    import functools
    import multiprocessing   # here: `charz` imports this module to build its parser

    # A pool whose workers are ended, not waited for, on Ctrl-C: an executor cancelling its queue
    # still waited at exit for chunks its workers had taken, and 4 of 16 interrupts 0.02-0.1 s
    # into a 2-worker sweep of 100000 configurations hung with the workers running on.
    # Ctrl-C is held while the pool starts: its workers and threads inherit the held signal, so
    # no worker is interrupted before its initializer ignores Ctrl-C, and the parent answers it.
    pool, held = None, _hold_interrupts()
    try:
        pool = multiprocessing.Pool(jobs, initializer=_ignore_interrupts)
        held = _release_interrupts(held)
        for done in pool.imap(functools.partial(_evaluate_chunk, evaluate), chunks):
            points.extend(done)
            if progress is not None:
                progress(len(points))
    except BaseException:
        # Ctrl-C or a failed configuration: the workers are ended at once, queued chunks with them
        if pool is not None:
            pool.terminate()
            pool.join()
        raise
    finally:
        _release_interrupts(held)
    pool.close()
    pool.join()
    return tuple(points)


def _run_dask(configs: Sequence[Mapping[str, float]], evaluate: Evaluate, scheduler: str,
              progress: Progress | None) -> tuple[SweepPoint, ...]:
    from ..errors import require_extra

    distributed = require_extra("distributed", "sweep")
    try:
        client = distributed.Client(scheduler, timeout=DASK_CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise UsageError(f"--dask-scheduler {scheduler!r}: cannot connect: {exc}") from None
    try:
        workers = max(1, len(client.scheduler_info().get("workers", {})))
        shared = client.scatter(evaluate, broadcast=True)
        chunks = _chunks(configs, workers * 8)
        futures = client.map(_evaluate_chunk, [shared] * len(chunks), chunks, pure=False)
        finished = 0
        for future in distributed.as_completed(futures, loop=client.loop):
            finished += len(chunks[futures.index(future)])
            if progress is not None:
                progress(finished)
        results = client.gather(futures)
    finally:
        client.close()
    return tuple(point for chunk in results for point in chunk)


__all__ = ["run_configs"]
