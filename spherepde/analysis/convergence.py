"""The measured error of a curve t -> W2(t) computed at two resolutions (docs/methods.md,
"What converged means"): one definition for the main job and the validation study."""
from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq

__all__ = ["resolution_error"]


def resolution_error(fine_times, fine_w2, coarse_times, coarse_w2, fine_width=None,
                     coarse_width=None):
    r"""|W2_fine - W2_coarse| at the two runs' common output times, each difference widened by
    both W2 brackets' widths (upper - lower; None where a run's values are exact): the most
    the two true distances can differ there.

    Parameters
    ----------
    fine_times, fine_w2 : (T,) the finer run's output times and values (widths: (T,) or None)
    coarse_times, coarse_w2 : (S,) the coarser run's (it may have stopped earlier)

    Returns
    -------
    times : (C,) the common times (matched to 1e-12), error : (C,)

    Examples
    --------
    >>> import numpy as np
    >>> t, err = resolution_error([0, 1, 2], [1.0, 0.5, 0.4], [0, 1], [1.0, 0.52],
    ...                           fine_width=[0, 0.01, 0])
    >>> t, err.round(6)
    (array([0., 1.]), array([0.  , 0.03]))
    """
    common, i, j = np.intersect1d(np.round(np.asarray(fine_times, float), 12),
                                  np.round(np.asarray(coarse_times, float), 12),
                                  return_indices=True)
    err = np.abs(np.asarray(fine_w2, float)[i] - np.asarray(coarse_w2, float)[j])
    for width, k in ((fine_width, i), (coarse_width, j)):
        if width is not None:
            err = err + np.asarray(width, float)[k]
    return common, err


def richardson(coarse, mid, fine, ratio=2.0):
    r"""The observed order of three runs refined by ``ratio`` each, and the fine run
    extrapolated with it, with an error bar.

    With an error e_h ≈ C h^p, the order p solves (h0^p − h1^p) / (h1^p − h2^p) =
    max|coarse − mid| / max|mid − fine| (max norms over the common samples, one order for the
    whole curve); with one ratio r for both steps that is p = log(that quotient) / log(r). The
    extrapolant R = fine + (fine − mid) h2^p / (h1^p − h2^p) (= (fine − mid) / (r^p − 1))
    removes the leading term. Its error bar is the correction itself, |R − fine| (the
    grid-convergence index without a safety factor): one order fitted to a whole curve is
    exact at its largest difference only, so R is credited with removing the leading error,
    not with knowing the remainder.

    Parameters
    ----------
    coarse, mid, fine : (T,) the same quantity at resolutions h0 > h1 > h2
    ratio : float > 1, or (h0/h1, h1/h2) where the two steps differ (cells at 64, 96, 128:
        (1.5, 4/3))

    Returns
    -------
    order : float (nan where there is no asymptotic range: the differences do not shrink
        fast enough for any positive order, or the two steps have opposite signs where either
        is largest, so that convergence oscillates and the quotient of their sizes alone
        would fit a spurious order whose correction lies beyond every resolution)
    extrapolated : (T,) R
    error : (T,) |R − fine|

    Examples
    --------
    >>> import numpy as np
    >>> exact, h = np.array([1.0, 2.0]), 0.1
    >>> runs = [exact + 3 * (h / 2**k) ** 2 for k in range(3)]
    >>> p, R, err = richardson(*runs)
    >>> round(p, 12), np.allclose(R, exact), np.allclose(err, runs[2] - exact)
    (2.0, True, True)
    """
    coarse, mid, fine = (np.asarray(a, float) for a in (coarse, mid, fine))
    r1, r2 = (float(ratio), float(ratio)) if np.ndim(ratio) == 0 else map(float, ratio)
    if not (r1 > 1 and r2 > 1):
        raise ValueError(f"ratio = {ratio}: each refinement ratio must exceed 1")
    if not coarse.shape == mid.shape == fine.shape:
        raise ValueError(f"shapes {coarse.shape}, {mid.shape}, {fine.shape}: the three runs "
                         "must be sampled at the same points")
    first, second = coarse - mid, mid - fine
    d_coarse, d_fine = np.max(np.abs(first)), np.max(np.abs(second))
    nan = np.full(fine.shape, np.nan)
    at = [int(np.argmax(np.abs(first))), int(np.argmax(np.abs(second)))]
    if np.any(first.ravel()[at] * second.ravel()[at] < 0):
        return float("nan"), nan, nan
    # the quotient of the two steps at order p, with h2 = 1: it rises from
    # log(r1) / log(r2) at p -> 0 without bound, so a positive order exists above that
    def quotient(p):
        return r2 ** p * (r1 ** p - 1) / (r2 ** p - 1)

    if not (d_fine > 0 and d_coarse / d_fine > math.log(r1) / math.log(r2)):
        return float("nan"), nan, nan
    if r1 == r2:
        p = float(math.log(d_coarse / d_fine) / math.log(r1))
    else:
        hi = 1.0
        while quotient(hi) < d_coarse / d_fine and hi < 64:
            hi *= 2
        p = (hi if quotient(hi) < d_coarse / d_fine   # order 64 or more: no correction left
             else float(brentq(lambda q: quotient(q) - d_coarse / d_fine, 1e-9, hi,
                               xtol=1e-14)))
    correction = (fine - mid) / (r2 ** p - 1)
    return p, fine + correction, np.abs(correction)
