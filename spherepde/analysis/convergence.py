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
