#!/usr/bin/env bash
# The Python package's tests (CTest test `python_tests`, label python), run in
# the .venv that tools/setup_python.sh made. Exits 77 (skipped) without it.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${FLASHCL_VENV:-.venv}
if [ ! -x "$venv/bin/python" ]; then
  echo "python_tests: no $venv (run bash tools/setup.sh, or tools/setup_python.sh)"
  exit 77
fi
# The tests import the installed package: refuse to test a stale copy of python/flashcl.
stale=$("$venv/bin/python" - <<'PY'
import filecmp, os, flashcl
src, dst = "python/flashcl", os.path.dirname(flashcl.__file__)
names = [n for n in os.listdir(src) if n.endswith(".py")]
print(" ".join(n for n in names if not os.path.exists(os.path.join(dst, n)) or not filecmp.cmp(os.path.join(src, n), os.path.join(dst, n), shallow=False)))
PY
)
if [ -n "$stale" ]; then
  echo "python_tests: the installed flashcl differs from python/flashcl ($stale): run tools/setup_python.sh"
  exit 1
fi
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests "$@"
