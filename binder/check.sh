#!/usr/bin/env bash
# What CI can check of binder/ without docker: binder's install steps in a fresh venv, the
# labextension visible to JupyterLab there, and the quickstart executed offline with it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python -m venv "$work/venv"
# shellcheck disable=SC1091
source "$work/venv/bin/activate"
cp -r "$root" "$work/repo"
rm -rf "$work/repo/.git" "$work/repo/labextension/node_modules"
(cd "$work/repo" && bash binder/postBuild >/dev/null)
jupyter labextension list 2>&1 | grep -E "openprogram-jupyter .*enabled.*OK" \
  || { echo "binder: labextension openprogram-jupyter not enabled"; exit 1; }
export OPENPROGRAM_HOME="$work/home"
cp "$root/notebooks/quickstart.ipynb" "$work/quickstart.ipynb"
python -m ipykernel install --sys-prefix --name python3 >/dev/null
openprogram run "$work/quickstart.ipynb"
python - "$work/quickstart.ipynb" <<'PY'
import json, sys
nb = json.load(open(sys.argv[1]))
sid = nb["metadata"]["openprogram"]["session_id"]
print(f"binder check: quickstart ran in a fresh venv, session {sid}")
PY
