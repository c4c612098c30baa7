"""What the validation scripts share: the least-squares line of their fits and the markdown
tables of their reports."""
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))
from _common import linear_fit, table  # noqa: E402


def test_linear_fit_gives_the_slope_and_how_much_of_the_spread_the_line_explains():
    x = np.log([0.8, 0.4, 0.2, 0.1])
    (slope, _), r2 = linear_fit(x, 0.004 * x + 0.01)
    assert math.isclose(slope, 0.004, rel_tol=1e-9) and math.isclose(r2, 1.0, rel_tol=1e-12)
    y = 0.004 * x + np.array([1e-3, -1e-3, 1e-3, -1e-3])
    (slope, _), r2 = linear_fit(x, y)
    assert 0.5 < r2 < 1.0
    # y without spread: the flat line, which explains it all (not rounding over zero)
    (slope, b), r2 = linear_fit(x, np.full(4, 0.3))
    assert abs(slope) < 1e-12 and math.isclose(b, 0.3) and r2 == 1.0


def test_table_formats_floats_and_shows_a_missing_value_as_an_explained_dash():
    text = table([["a", 1.234567, 3], ["b", np.float64(math.nan), "x"]], ["k", "v", "w"])
    lines = text.splitlines()
    assert lines[:4] == ["| k | v | w |", "|---|---|---|", "| a | 1.235 | 3 |", "| b | – | x |"]
    assert "nan" not in text and lines[-1].startswith("*(–: not reached")
    # no dash, no note; no rows, a note that says so
    assert table([[1.0]], ["v"]).splitlines()[-1] == "| 1 |"
    assert "no rows" in table([], ["v"])
