#!/usr/bin/env bash
# Fails when a tracked C++/CUDA file differs from what clang-format makes of it with the
# repository's .clang-format; prints the files and the first differences. Fix with:
#   clang-format -i $(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
set -euo pipefail
cd "$(dirname "$0")/.."
CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
if ! command -v "$CLANG_FORMAT" >/dev/null; then
  echo "check_format: $CLANG_FORMAT not found (scripts/setup.sh installs clang-format)" >&2
  exit 2
fi
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
bad=0
for f in "${files[@]}"; do
  if ! "$CLANG_FORMAT" --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "not formatted: $f"
    "$CLANG_FORMAT" "$f" | diff -u "$f" - | head -n 20 || true
    bad=1
  fi
done
echo "check_format: ${#files[@]} files, $([[ $bad -eq 0 ]] && echo "all formatted" || echo "some not formatted")"
exit $bad
