"""A run of :func:`kameleon.sample` as it was asked for, and its progress bar."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from kameleon.core.diagnostics.findings import StopRule

__all__ = ["LogDensity"]

LogDensity = Callable[[npt.NDArray[np.float64]], Any]
"""A log density at a point: a float (``None`` or ``-inf`` outside the support); for a
sampler that uses gradients (``mala``), the pair ``(log density, gradient)``."""

#: How often the progress bar is redrawn, and R-hat asked of a service, in seconds.
_REFRESH, _RHAT_EVERY = 0.2, 10.0


@dataclass
class _Run:
    logdensity: LogDensity
    dim: int
    initial: npt.NDArray[np.float64] | None
    algorithm: str
    chains: int
    iterations: int
    warmup: int
    seed: int
    rule: StopRule | None
    initial_radius: float | None
    max_initial_attempts: int
    names: list[str]
    options: dict[str, Any]
    progress: bool
    conditionals: dict[int, Any] = field(default_factory=dict)


@dataclass
class _Progress:
    """A tqdm bar of iterations (transitions) with acceptance, evaluations per second and
    R-hat; a no-op when off. Thread-safe: workers count, one thread draws."""

    total: int
    enabled: bool
    started: float = field(default_factory=time.monotonic)
    iterations: int = 0
    accepted: int = 0
    evaluations: int = 0
    r_hat: float | None = None
    acceptance_known: bool = True
    _shown: int = 0
    _drawn_at: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _bar: Any = None

    def __post_init__(self) -> None:
        if self.enabled:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.total, unit="it", desc="sampling", dynamic_ncols=True)

    def count(self, evaluations: int, iterations: int, accepted: int) -> None:
        with self._lock:
            self.evaluations += evaluations
            self.iterations += iterations
            self.accepted += accepted

    def draw(self, force: bool = False) -> None:
        if self._bar is None:
            return
        now = time.monotonic()
        if not force and now - self._drawn_at < _REFRESH:
            return
        self._drawn_at = now
        with self._lock:
            n, accepted, evaluations = self.iterations, self.accepted, self.evaluations
        self._bar.update(n - self._shown)
        self._shown = n
        fields = {"eval/s": f"{evaluations / max(now - self.started, 1e-9):.3g}"}
        if n and self.acceptance_known:
            fields["acc"] = f"{accepted / n:.2f}"
        if self.r_hat is not None and not math.isnan(self.r_hat):
            fields["r_hat"] = f"{self.r_hat:.3f}"
        self._bar.set_postfix(fields, refresh=False)

    def close(self) -> None:
        if self._bar is not None:
            self.draw(force=True)
            self._bar.close()


def single_threaded_worker() -> None:
    """A pool process's initializer: one BLAS thread, so that ``workers`` processes
    evaluating at once do not each start a thread per core (OpenBLAS's default), which
    oversubscribes the machine and can make each evaluation many times slower."""
    import os

    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = "1"
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")
