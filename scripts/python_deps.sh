#!/usr/bin/env bash
# Runs python3 with the test-only Python packages, installing them the first time, into a
# cache outside the clone (pip --target; Debian's own python3 stays untouched, so no venv
# or --break-system-packages is needed). Fresh clones reuse it. The sets:
#   * `gguf` (llama.cpp's gguf-py from PyPI, the independent dequantizer of tests/quant/)
#     and `numpy`;
#   * gRPC for Python, pinned as one set that works together on Python 3.11: `grpcio`,
#     `grpcio-tools` (protoc for the Python client in clients/python), `grpcio-reflection`,
#     `grpcio-health-checking` and `protobuf` (the cluster tests' reflection and health
#     clients, and the Python client's tests), and `wheel` (setuptools < 70.1, Debian's,
#     builds wheels through it: the client's test installs it with --no-build-isolation);
#   * http/: the official `openai` SDK and `prometheus_client` (clients of the HTTP front),
#     with their dependencies, in a folder of their own;
#   * k8s/: `kubernetes-validate` (the Kubernetes API's JSON schemas, bundled, checked
#     offline) with its dependencies (jsonschema, PyYAML, packaging, ...), for deploy/k8s's
#     manifests. Not on PYTHONPATH, so that no other test imports its packages in place of
#     its own: the test that wants it adds $CASCADE_PYTHON_CACHE/k8s to sys.path.
#   * jinja/: `jinja2` with `MarkupSafe`, the reference renderer of chat templates
#     (tests/text/jinja_goldens.py, transformers' environment). In a folder of their own, not
#     on PYTHONPATH (the script that wants them adds $CASCADE_PYTHON_CACHE/jinja to sys.path),
#     so that the pinned jinja2 is the one checked whatever python3 has installed.
#   * jsonschema/: `jsonschema` (Draft 2020-12) with `rfc3339-validator` for its time
#     formats, the judge of structured output (tests/grammar/json_schema_cases.py,
#     tests/integration/structured_output_test.py), which add $CASCADE_PYTHON_CACHE/jsonschema
#     to sys.path. Checked by its dist-info folder.
#   * transformers-4.57.6/ and transformers-5.25.0/: Hugging Face `transformers` of each
#     generation (no torch: only their config classes are imported), the reference for the
#     config.json defaults of model/format/hf_defaults.cc (tests/format/hf_defaults_goldens.py
#     runs each in a python3 of its own). Checked by their dist-info folders, not by an
#     import, which would cost every test that runs through this script a second.
# Each set is checked by one import (and its version) and installed only when it fails.
# Usage: scripts/python_deps.sh [python args...]   (no args: only install)
set -euo pipefail
GGUF_VERSION=0.19.0
GRPC_VERSION=1.84.0      # grpcio, grpcio-tools, grpcio-reflection, grpcio-health-checking
PROTOBUF_VERSION=7.36.2  # what grpcio-tools $GRPC_VERSION generates code for (>= 7.35.1)
WHEEL_VERSION=0.45.1     # the last wheel with its own bdist_wheel (for setuptools < 70.1)
OPENAI_VERSION=3.60.0
PROMETHEUS_CLIENT_VERSION=0.26.0
KUBERNETES_VALIDATE_VERSION=1.37.0
JINJA2_VERSION=3.1.6
MARKUPSAFE_VERSION=3.0.3
TRANSFORMERS_VERSIONS=(4.57.6 5.25.0)
JSONSCHEMA_VERSION=4.26.0
RFC3339_VALIDATOR_VERSION=0.1.4
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/cascade/python/$(python3 -c 'import sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}")')"
export PYTHONPATH="$CACHE/http:$CACHE${PYTHONPATH:+:$PYTHONPATH}"
export CASCADE_PYTHON_CACHE=$CACHE

# pip_install WHAT ARGS...: installs into the cache, or says why not and exits 1.
pip_install() {
  local what=$1 log
  shift
  echo "python_deps: installing $what into $CACHE" >&2
  mkdir -p "$CACHE"
  log=$(mktemp)
  if ! "$@" >"$log" 2>&1; then
    echo "python_deps: pip install failed (offline? PyPI is needed once):" >&2
    tail -n 5 "$log" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
}
PIP=(python3 -m pip install -q --disable-pip-version-check --upgrade --target)

if ! python3 -c "import numpy, gguf; assert gguf.__file__.startswith('$CACHE')" >/dev/null 2>&1; then
  pip_install "gguf==$GGUF_VERSION and numpy" bash -c "$(printf '%q ' "${PIP[@]}" "$CACHE") --no-deps gguf==$GGUF_VERSION &&
    { python3 -c 'import numpy' 2>/dev/null || $(printf '%q ' "${PIP[@]}" "$CACHE") numpy; }"
fi
if ! python3 -c "
import grpc, grpc_tools.protoc, grpc_reflection.v1alpha.reflection_pb2_grpc, grpc_health.v1.health_pb2_grpc
import google.protobuf, wheel
assert wheel.__version__ == '$WHEEL_VERSION'
assert grpc.__version__ == '$GRPC_VERSION' and google.protobuf.__version__ == '$PROTOBUF_VERSION'
assert grpc.__file__.startswith('$CACHE')" >/dev/null 2>&1; then
  pip_install "grpcio $GRPC_VERSION (+ tools, reflection, health), protobuf $PROTOBUF_VERSION and wheel" \
    "${PIP[@]}" "$CACHE" --no-deps "grpcio==$GRPC_VERSION" "grpcio-tools==$GRPC_VERSION" \
    "grpcio-reflection==$GRPC_VERSION" "grpcio-health-checking==$GRPC_VERSION" "protobuf==$PROTOBUF_VERSION" \
    "wheel==$WHEEL_VERSION"
fi
if ! python3 -c "
import openai, prometheus_client
assert openai.__version__ == '$OPENAI_VERSION' and prometheus_client.__file__.startswith('$CACHE/http')" >/dev/null 2>&1; then
  pip_install "openai $OPENAI_VERSION and prometheus_client $PROMETHEUS_CLIENT_VERSION" \
    "${PIP[@]}" "$CACHE/http" "openai==$OPENAI_VERSION" "prometheus_client==$PROMETHEUS_CLIENT_VERSION"
fi
if ! PYTHONPATH="$CACHE/k8s" python3 -c "
import kubernetes_validate, yaml
from importlib.metadata import version
assert version('kubernetes-validate') == '$KUBERNETES_VALIDATE_VERSION'
assert kubernetes_validate.__file__.startswith('$CACHE/k8s')" >/dev/null 2>&1; then
  pip_install "kubernetes-validate $KUBERNETES_VALIDATE_VERSION" \
    "${PIP[@]}" "$CACHE/k8s" "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
fi
if ! PYTHONPATH="$CACHE/jinja" python3 -c "
import jinja2, markupsafe
assert jinja2.__version__ == '$JINJA2_VERSION' and jinja2.__file__.startswith('$CACHE/jinja')
assert markupsafe.__file__.startswith('$CACHE/jinja')" >/dev/null 2>&1; then
  pip_install "jinja2 $JINJA2_VERSION and MarkupSafe $MARKUPSAFE_VERSION" \
    "${PIP[@]}" "$CACHE/jinja" --no-deps "jinja2==$JINJA2_VERSION" "markupsafe==$MARKUPSAFE_VERSION"
fi
if [[ ! -d $CACHE/jsonschema/jsonschema-$JSONSCHEMA_VERSION.dist-info ||
      ! -d $CACHE/jsonschema/rfc3339_validator-$RFC3339_VALIDATOR_VERSION.dist-info ]]; then
  pip_install "jsonschema $JSONSCHEMA_VERSION and rfc3339-validator $RFC3339_VALIDATOR_VERSION" \
    "${PIP[@]}" "$CACHE/jsonschema" "jsonschema==$JSONSCHEMA_VERSION" "rfc3339-validator==$RFC3339_VALIDATOR_VERSION"
fi
for v in "${TRANSFORMERS_VERSIONS[@]}"; do
  if [[ ! -d $CACHE/transformers-$v/transformers-$v.dist-info ]]; then
    pip_install "transformers $v" "${PIP[@]}" "$CACHE/transformers-$v" "transformers==$v"
  fi
done
(($#)) || exit 0
exec python3 "$@"
