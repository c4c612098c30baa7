#!/usr/bin/env bash
# Set up spherepde in ./.venv on a fresh Debian + Python 3.11 machine.
#  - FFTW (Debian's libfftw3-dev) so that shtns, the fast spherical-harmonic engine, can be
#    built; without root or apt the install goes on with ducc0 alone.
#  - The package itself, editable, with its test extra (pytest, pyshtools).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

if [ ! -f /usr/include/fftw3.h ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfftw3-dev) \
      || echo "setup: could not install libfftw3-dev; shtns will be skipped, ducc0 is used"
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    (sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfftw3-dev) \
      || echo "setup: could not install libfftw3-dev; shtns will be skipped, ducc0 is used"
  else
    echo "setup: FFTW headers missing and no root: shtns will be skipped, ducc0 is used"
  fi
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test]"
if [ -f /usr/include/fftw3.h ]; then
  .venv/bin/python -m pip install -q "shtns>=3.6" \
    || echo "setup: shtns did not build; spherepde falls back to ducc0"
fi
.venv/bin/python -c "import spherepde.spectral.backends as b; print('spherepde: SHT backends', b.available())" 2>/dev/null \
  || .venv/bin/python -c "import spherepde; print('spherepde', spherepde.__version__, 'installed')"
