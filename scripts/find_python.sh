#!/usr/bin/env bash
# Print the first Python TensorFlow 2.15 supports (3.9-3.11): $PYTHON if set, else python3, python3.11,
# python3.10, python3.9 from PATH; otherwise say in one line how to get one, and exit 2.
supported() { "$1" -c 'import sys; sys.exit(not (3, 9) <= sys.version_info[:2] <= (3, 11))' 2>/dev/null; }
if [ -n "${PYTHON:-}" ]; then
  command -v "$PYTHON" >/dev/null || { echo "setup: PYTHON=$PYTHON not found" >&2; exit 2; }
  supported "$PYTHON" || { echo "setup: PYTHON=$PYTHON is $("$PYTHON" --version 2>&1), TensorFlow 2.15 needs 3.9-3.11" >&2; exit 2; }
  echo "$PYTHON"; exit 0
fi
for candidate in python3 python3.11 python3.10 python3.9; do
  command -v "$candidate" >/dev/null && supported "$candidate" && { echo "$candidate"; exit 0; }
done
found=$(command -v python3 >/dev/null && python3 --version 2>&1 || echo "no python3")
echo "setup: $found, and TensorFlow 2.15 needs Python 3.9-3.11: install one (uv python install 3.11; or" \
  "apt-get install python3.11-venv python3.11-dev from deadsnakes) and rerun, or use Docker: make docker-verify" >&2
exit 2
