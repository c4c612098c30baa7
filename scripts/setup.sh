#!/usr/bin/env bash
# Set up spherepde in ./.venv on a fresh Debian + Python 3.11 machine.
#  - Debian packages, where missing: python3-venv (a stock Debian python3 cannot create a
#    virtualenv without it), and for shtns, the fast spherical-harmonic engine: FFTW
#    (libfftw3-dev), a C compiler (build-essential) and the Python headers (python3-dev).
#    Without root or apt the install goes on: shtns is skipped and ducc0 is used.
#  - The package itself, editable, with its test extra (pytest, pyshtools) and its docs extra
#    (sphinx, numpydoc: the API reference).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

need=()
"$PY" -c "import ensurepip" 2>/dev/null || need+=(python3-venv)
[ -f /usr/include/fftw3.h ] || need+=(libfftw3-dev)
command -v cc >/dev/null 2>&1 || need+=(build-essential)
"$PY" - <<'PYEOF' 2>/dev/null || need+=(python3-dev)
import os, sys, sysconfig
sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)
PYEOF
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need[*]}"
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}") \
      || echo "setup: could not install ${need[*]}; shtns will be skipped, ducc0 is used"
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    (sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}") \
      || echo "setup: could not install ${need[*]}; shtns will be skipped, ducc0 is used"
  else
    echo "setup: no root to install ${need[*]}: shtns will be skipped, ducc0 is used"
  fi
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test,docs]"
if [ -f /usr/include/fftw3.h ]; then
  .venv/bin/python -m pip install -q "shtns>=3.6" \
    || echo "setup: shtns did not build; spherepde falls back to ducc0"
fi
.venv/bin/python -c "import spherepde, spherepde.transforms.sht as b; print('spherepde', spherepde.__version__, 'installed; SHT backends:', ', '.join(b.available_backends()))"
# numba compiles each kernel at its first call and caches it on disk: do it once here (about a
# minute on 2 cores) rather than inside the first `spherepde run`
.venv/bin/python -m spherepde.app.warmup
