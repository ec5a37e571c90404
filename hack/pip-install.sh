#!/usr/bin/env bash
# pip install, quietly: setuptools' editable-install notices are silenced (they are about its own
# modes, not this package), and so are the "Location ... is ignored" lines a machine-wide pip config
# pointing at absent local indexes prints for every package. Errors and everything else still show;
# pip's exit code is kept.
set -o pipefail
pip="$1"; shift
PYTHONWARNINGS=ignore "$pip" install -q "$@" 2>&1 \
  | { grep -v "^WARNING: Location '.*' is ignored: it is neither a file nor a directory" || true; }
