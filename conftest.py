"""Settings of every test session (tests/ and plugins/*/tests): the tokenized-corpus cache
(seqxduce.corpus.token_cache) goes to a folder of the session's own, not the user's ~/.cache, and is removed at
the end; under pytest-xdist each worker gets its share of the CPUs as OMP_NUM_THREADS."""

import atexit
import os
import shutil
import sys
import tempfile

from seqxduce.cpus import per_worker_threads

if not os.environ.get("SEQXDUCE_CACHE"):
    _cache = tempfile.mkdtemp(prefix="seqxduce-test-cache-")
    os.environ["SEQXDUCE_CACHE"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)


def _fit_worker_threads() -> None:
    """Each of pytest-xdist's N workers takes cpus // N threads (at least 1), and so does every process it starts
    (the variable is inherited), unless the user set OMP_NUM_THREADS. Why: torch starts a thread per core in every
    worker, and two workers training side by side on 2 cores spun their OpenMP threads against each other: the
    marian and streaming fixtures took 39 s and 29 s so, 8 s and under 5 s with one thread each (bench/log/
    2026-12-04-suite-threads.md). Tests of the threads' own rules set or remove the variable themselves."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not workers.isdigit() or int(workers) < 1 or os.environ.get("OMP_NUM_THREADS"):
        return
    threads = per_worker_threads(int(workers))
    os.environ["OMP_NUM_THREADS"] = str(threads)
    if "torch" in sys.modules:  # a plugin of pytest's loaded torch before this file: its pool is already sized
        sys.modules["torch"].set_num_threads(threads)


_fit_worker_threads()
