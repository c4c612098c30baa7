"""Transforms between grid values and coefficients, below everything that uses them:
spherical harmonics on S^2 (:mod:`.sht`, over shtns or ducc0) and Fourier modes on S^1
(:mod:`.fourier`)."""
