"""Transforms below everything that uses them: spherical-harmonic transforms on S^2 (shtns,
ducc0) in :mod:`.sht`."""
