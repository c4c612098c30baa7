"""The measured error of a curve t -> W2(t) computed at two resolutions (docs/methods.md,
"What converged means"): one definition for the main job and the validation study."""
from __future__ import annotations

import numpy as np

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


def richardson(coarse, mid, fine, ratio: float = 2.0):
    r"""The observed order of three runs refined by ``ratio`` each, and the fine run
    extrapolated with it, with an error bar.

    With an error e_h ≈ C h^p, the order is p = log(max|coarse − mid| / max|mid − fine|) /
    log(ratio) (max norms over the common samples, one order for the whole curve), and the
    extrapolant R = fine + (fine − mid) / (ratio^p − 1) removes the leading term. Its error
    bar is the correction itself, |R − fine| (the grid-convergence index without a safety
    factor): one order fitted to a whole curve is exact at its largest difference only, so
    R is credited with removing the leading error, not with knowing the remainder.

    Parameters
    ----------
    coarse, mid, fine : (T,) the same quantity at resolutions h, h/ratio, h/ratio²
    ratio : float > 1

    Returns
    -------
    order : float (nan when the differences do not shrink: no asymptotic range)
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
    if not ratio > 1:
        raise ValueError(f"ratio = {ratio}: the refinement ratio must exceed 1")
    if not coarse.shape == mid.shape == fine.shape:
        raise ValueError(f"shapes {coarse.shape}, {mid.shape}, {fine.shape}: the three runs "
                         "must be sampled at the same points")
    d_coarse, d_fine = np.max(np.abs(coarse - mid)), np.max(np.abs(mid - fine))
    if not (d_fine > 0 and d_coarse > d_fine):
        nan = np.full(fine.shape, np.nan)
        return float("nan"), nan, nan
    p = float(np.log(d_coarse / d_fine) / np.log(ratio))
    correction = (fine - mid) / (ratio ** p - 1)
    return p, fine + correction, np.abs(correction)
