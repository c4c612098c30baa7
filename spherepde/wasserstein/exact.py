"""Exact W2 by the network simplex (POT ``emd``) on the full cost matrix."""
from __future__ import annotations

import time

import numpy as np

from .costs import cost_matrix
from .result import W2Result, reject_options

__all__ = ["w2_exact", "EXACT_MAX_PAIRS", "EXACT_BYTES_PER_PAIR"]

#: Largest cost matrix (n*m entries) the exact solver accepts: 2e4 points a side. POT's
#: network simplex holds the cost matrix, the plan and per-arc state, about 44 bytes per entry
#: (measured: 4.4 GB peak and 18 s for 1e4 x 1e4 points), so a problem is also refused when
#: the machine does not have that much memory available.
EXACT_MAX_PAIRS = 400_000_000
#: Bytes per cost-matrix entry that the network simplex needs (measured, with a margin).
EXACT_BYTES_PER_PAIR = 45


def _available_memory():
    """Bytes of memory available now (Linux /proc/meminfo), or None where unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def w2_exact(x, a, y, b, cost, numItermax=None, **unused):
    import ot

    reject_options(unused, "exact")
    n, m = len(a), len(b)
    if n * m > EXACT_MAX_PAIRS:
        raise ValueError(
            f"the exact solver needs n*m <= {EXACT_MAX_PAIRS:.0e} (network simplex memory); got "
            f"n*m = {n}*{m} = {n * m:.2e}. Use method='semidiscrete' when one side has few atoms "
            "(it handles 10^5-point grids), or method='multiscale' (sparse Sinkhorn with a "
            "certified bracket, O(n + m) memory); or, with ~45 bytes of memory per pair to "
            "spare, raise spherepde.wasserstein.exact.EXACT_MAX_PAIRS")
    need, avail = EXACT_BYTES_PER_PAIR * n * m, _available_memory()
    if avail is not None and need > avail:
        raise MemoryError(
            f"the exact solver needs about {need / 2**30:.1f} GiB for n*m = {n}*{m} pairs; "
            f"{avail / 2**30:.1f} GiB are available. Use method='semidiscrete' when one side has "
            "few atoms, or method='multiscale' (a certified bracket in O(n + m) memory)")
    t0 = time.perf_counter()
    M = cost_matrix(x, y, cost)
    it = int(numItermax) if numItermax is not None else max(1_000_000, 100 * (n + m) ** 2)
    it = min(it, 2**62)
    val, log = ot.emd2(a, b, M, numItermax=it, log=True)
    if log["result_code"] != 1:
        raise RuntimeError(f"network simplex stopped without an optimum: {log['warning']} "
                           f"(numItermax = {it}); pass a larger numItermax")
    details = {"n": n, "m": m, "seconds": time.perf_counter() - t0, "w2_squared": float(val),
               "numItermax": it}
    return W2Result(np.sqrt(max(float(val), 0.0)), cost, "exact", 0.0, details)


