"""Atomic writes: a failure mid-write leaves the previous file intact."""
import numpy as np
import pytest

from spherepde import io


def test_npz_round_trip_with_metadata(tmp_path):
    p = io.save_npz(tmp_path / "a.npz", x=np.arange(3.0), meta={"beta": 2.0, "kind": "SA"})
    d = io.load_npz(p)
    np.testing.assert_array_equal(d["x"], [0.0, 1.0, 2.0])
    assert d["meta"] == {"beta": 2.0, "kind": "SA"}


def test_failed_write_keeps_the_old_file(tmp_path):
    p = tmp_path / "r.txt"
    io.write_text(p, "finished work")
    with pytest.raises(RuntimeError):
        with io.atomic_path(p) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed mid-write")
    assert p.read_text() == "finished work"
    assert [f.name for f in tmp_path.iterdir()] == ["r.txt"]  # no temporary left behind
