"""Native microbenchmark kernels: C sources compiled at first use (:mod:`.build`) and their typed
Python APIs (:mod:`.cpu` for the host CPU, :mod:`.traffic` for the background memory traffic
of contention cases).
The build cache in :mod:`.build` is generic: any C source compiles through it.

Importing this package compiles nothing; the first kernel call does.
"""
from __future__ import annotations
