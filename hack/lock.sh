#!/usr/bin/env bash
# Writes the lock files the image build installs with `pip install --require-hashes --no-deps`
# (`make lock`; run it after changing a dependency in pyproject.toml):
#
#   requirements.lock         [project] dependencies, with every transitive one, exact versions
#                             and the sha256 of every file of each version
#   requirements-build.lock   [build-system] requires (setuptools, wheel), the same way
#
# Resolved for the image's platform: CPython 3.11 on x86_64 glibc 2.36 (Debian bookworm, the
# base's suite). tests/unit/test_lock.py holds the locks to pyproject.toml; the image build's
# `pip check` fails when a lock misses a dependency.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
venv="${VENV:-.venv}"
uv_version=0.13.9
if ! "$venv/bin/uv" --version 2>/dev/null | grep -qx "uv $uv_version.*"; then
  "$venv/bin/python" -m pip install --quiet "uv==$uv_version"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$venv/bin/python" - "$work/build.in" <<'PY'
import sys, tomllib
requires = tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]
open(sys.argv[1], "w").write("\n".join(requires) + "\n")
PY
compile() {
  "$venv/bin/uv" pip compile --quiet --generate-hashes --no-annotate --allow-unsafe \
    --python-version 3.11 --python-platform x86_64-manylinux_2_36 \
    --custom-compile-command "make lock" --upgrade "$@"
}
compile pyproject.toml -o requirements.lock
compile "$work/build.in" -o requirements-build.lock
sed -i "s#$work/build.in#pyproject.toml [build-system] requires#" requirements-build.lock
echo "wrote requirements.lock ($(grep -c '^[a-z0-9]' requirements.lock) packages)," \
  "requirements-build.lock ($(grep -c '^[a-z0-9]' requirements-build.lock) packages)"
