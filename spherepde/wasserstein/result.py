"""The result type of every W2 solver: a float that carries its bracket, cost and method."""
from __future__ import annotations

import numpy as np

__all__ = ["W2Result", "bracket_result", "reject_options"]


class W2Result(float):
    """A W2 distance (a float) that remembers how it was computed.

    Attributes
    ----------
    value : float
        The distance W2 (not squared).
    cost : str
        "chordal" or "geodesic".
    method : str
        "exact", "semidiscrete", "circle", "multiscale", "quantized" or "sparse" (never "auto").
    error : float
        Bound on |value - W2|: 0 for the exact LP (round-off only), the half-width of the
        certified dual/primal bracket for the other two.
    lower, upper : float
        The certified bracket lower <= W2 <= upper (``details["w2_bracket"]``); both equal the
        value for the exact LP.
    details : dict
        Method-specific figures (epsilon, bracket, iterations, timings, sizes).
    """

    def __new__(cls, value, cost, method, error=0.0, details=None):
        obj = super().__new__(cls, value)
        obj.cost = cost
        obj.method = method
        obj.error = float(error)
        obj.details = dict(details or {})
        return obj

    @property
    def value(self) -> float:
        return float(self)

    @property
    def squared(self) -> float:
        return float(self) ** 2

    @property
    def lower(self) -> float:
        """Certified lower bound on W2."""
        return float(self.details.get("w2_bracket", (float(self), float(self)))[0])

    @property
    def upper(self) -> float:
        """Certified upper bound on W2."""
        return float(self.details.get("w2_bracket", (float(self), float(self)))[1])

    def __repr__(self) -> str:
        return (f"W2Result({float(self):.10g}, cost={self.cost!r}, method={self.method!r}, "
                f"error={self.error:.1e})")

    def __reduce__(self):
        return (W2Result, (float(self), self.cost, self.method, self.error, self.details))


def bracket_result(w2sq_upper, w2sq_lower, cost, method, details, value_sq=None):
    """Build a W2Result from a bracket L <= W2^2 <= U (and an estimate inside it; by default
    the midpoint of the bracket on W2)."""
    upper = np.sqrt(max(w2sq_upper, 0.0))
    lower = np.sqrt(max(min(w2sq_lower, w2sq_upper), 0.0))
    if value_sq is None:
        value = 0.5 * (lower + upper)
    else:
        value = min(max(np.sqrt(max(value_sq, 0.0)), lower), upper)
    error = max(upper - value, value - lower)
    details = dict(details, w2_bracket=(lower, upper), w2_squared_bracket=(w2sq_lower, w2sq_upper))
    return W2Result(value, cost, method, error, details)


def reject_options(unused, method):
    if unused:
        raise TypeError(f"unknown option(s) for method={method!r}: {', '.join(sorted(unused))}")
