#!/usr/bin/env bash
# The Python package (python/, issue 16): a virtual environment in .venv with
# the package built from this checkout and its test dependencies (pytest,
# ml_dtypes, PyTorch, transformers). Run by tools/setup.sh; run it again after
# changing python/ (the build in build-python/ is incremental). Python:
# FLASHCL_PYTHON_EXE, else Debian's /usr/bin/python3, else python3.
# Wheels are downloaded once into FLASHCL_WHEELHOUSE (default
# ~/.cache/flashcl-wheels; "off": no wheelhouse) and installed from there:
# pip's own HTTP cache stays empty on machines whose registry answers are not
# cacheable, and torch alone is half a gigabyte.
set -euo pipefail
cd "$(dirname "$0")/.."

py=${FLASHCL_PYTHON_EXE:-}
if [ -z "$py" ]; then
  if [ -x /usr/bin/python3 ]; then py=/usr/bin/python3; else py=python3; fi
fi
step() { echo "setup_python: $1 ($(( $(date +%s) - start )) s)"; }
start=$(date +%s)
pip=(.venv/bin/python -m pip install -q --disable-pip-version-check)
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
  "${pip[@]}" --upgrade pip  # Debian 12's pip 23.0 predates parts of the build interface used here
  step "created .venv with $("$py" --version)"
fi
wheels=${FLASHCL_WHEELHOUSE:-$HOME/.cache/flashcl-wheels}
export FLASHCL_WHEELHOUSE=$wheels  # for install_torch.py
if [ "$wheels" = off ]; then
  "${pip[@]}" -r python/requirements-test.txt
else
  .venv/bin/python -m pip download -q --disable-pip-version-check -d "$wheels" -r python/requirements-test.txt
  "${pip[@]}" --no-index --find-links "$wheels" -r python/requirements-test.txt
fi
step "test dependencies"
# --no-build-isolation: the build requirements are in .venv already, and the
# CMake tree in build-python/ stays valid from one run to the next.
"${pip[@]}" --no-build-isolation --config-settings=build-dir=build-python .
step "flashcl $(.venv/bin/python -c 'import flashcl; print(flashcl.__version__)') installed"
# Last: the light torch install leaves torch's CUDA requirements unmet, and
# pip would complain about that on every later install.
.venv/bin/python tools/install_torch.py "$(cat python/requirements-torch.txt)"
step "torch"
