#!/usr/bin/env bash
# Clang's thread-safety analysis over the sources whose locking is annotated
# (ABSL_GUARDED_BY, ABSL_EXCLUSIVE_LOCKS_REQUIRED on absl::Mutex members). GCC, which
# builds the project, ignores those annotations; this script makes them checked.
#
#   scripts/check_thread_safety.sh BUILD_DIR
#
# Which files: every .cc under coordinator/ worker/ comm/ core/ that mentions
# absl/base/thread_annotations.h, ABSL_GUARDED_BY or ABSL_PT_GUARDED_BY itself or in a
# project header it includes (directly or transitively: "dir/x.h" includes resolved from
# the repository root). That covers the annotated classes' own .cc files and every file
# that uses their annotated members (e.g. inference_service.cc reading a RequestChannel).
#
# How: each file is parsed with clang++ (-fsyntax-only -Wthread-safety
# -Werror=thread-safety) using the -I/-isystem/-iquote/-D/-U/-std (and target -m*,
# -pthread, -fopenmp-simd) flags of its BUILD_DIR/compile_commands.json entry; GCC's
# warning and optimisation flags are dropped. A file of the list without an entry (not
# built in this configuration, e.g. comm/cuda/ without CUDA) is reported as "skip".
#
# Prints one line per file (ok / FAIL / skip), the diagnostics of failing files, and
# exits 1 when any file has a thread-safety error or does not parse, 2 on bad usage.
# Environment: CLANGXX (default /usr/bin/clang++).
set -euo pipefail

if [[ $# -ne 1 || ! -f "$1/compile_commands.json" ]]; then
  echo "usage: $0 BUILD_DIR  (a configured build directory with compile_commands.json)" >&2
  exit 2
fi
BUILD_DIR=$(cd "$1" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CLANGXX=${CLANGXX:-/usr/bin/clang++}
if [[ ! -x "$CLANGXX" ]]; then
  echo "$0: $CLANGXX not found (set CLANGXX)" >&2
  exit 2
fi

# Lines "FILE<TAB>DIRECTORY<TAB>FLAG<TAB>FLAG..." (DIRECTORY empty: no entry).
plan=$(python3 - "$ROOT" "$BUILD_DIR/compile_commands.json" <<'PY'
import json, os, re, shlex, sys

root, db = sys.argv[1], sys.argv[2]
pattern = re.compile(r'absl/base/thread_annotations\.h|\bABSL_(PT_)?GUARDED_BY\b')
include = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

def annotated(path, seen):
    if path in seen:
        return False
    seen.add(path)
    with open(path, errors='replace') as f:
        text = f.read()
    if pattern.search(text):
        return True
    for h in include.findall(text):
        p = os.path.join(root, h)
        if os.path.isfile(p) and annotated(p, seen):
            return True
    return False

entries = {}
for e in json.load(open(db)):
    path = os.path.realpath(os.path.join(e['directory'], e['file']))
    entries.setdefault(path, e)

def clang_flags(e):
    args = e['arguments'] if 'arguments' in e else shlex.split(e['command'])
    out, i = [], 1  # args[0] is the compiler
    takes_value = ('-I', '-isystem', '-iquote', '-D', '-U', '-include')
    while i < len(args):
        a = args[i]
        if a in takes_value and i + 1 < len(args):
            out += [a, args[i + 1]]
            i += 2
            continue
        if (a.startswith(('-I', '-D', '-U', '-std=', '-m')) or a == '-pthread'
                or a.startswith('-fopenmp-simd')):
            out.append(a)
        # Everything else (-W*, -Werror, -O*, -fPIC, -o X, -c, the source) is dropped.
        i += 1
    return out

for d in ('coordinator', 'worker', 'comm', 'core'):
    for dirpath, _, names in sorted(os.walk(os.path.join(root, d))):
        for n in sorted(names):
            if not n.endswith('.cc'):
                continue
            path = os.path.realpath(os.path.join(dirpath, n))
            if not annotated(path, set()):
                continue
            rel = os.path.relpath(path, root)
            e = entries.get(path)
            if e is None:
                print(rel)
            else:
                print('\t'.join([rel, e['directory']] + clang_flags(e)))
PY
)

status=0
n_ok=0
n_fail=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
while IFS=$'\t' read -r -a fields; do
  [[ ${#fields[@]} -eq 0 ]] && continue
  file=${fields[0]}
  if [[ ${#fields[@]} -lt 2 ]]; then
    echo "skip $file (no compile_commands.json entry: not built in this configuration)"
    continue
  fi
  dir=${fields[1]}
  flags=("${fields[@]:2}")
  if (cd "$dir" && "$CLANGXX" -fsyntax-only -Wthread-safety -Werror=thread-safety -ferror-limit=0 \
        "${flags[@]}" "$ROOT/$file") >"$log" 2>&1; then
    echo "ok   $file"
    n_ok=$((n_ok + 1))
  else
    ts=$(grep -c 'error: .*-Wthread-safety' "$log" || true)
    other=$(grep 'error:' "$log" | grep -vc -- '-Wthread-safety' || true)
    echo "FAIL $file ($ts thread-safety error(s), $other other error(s))"
    sed 's/^/    /' "$log"
    n_fail=$((n_fail + 1))
    status=1
  fi
done <<<"$plan"

echo "thread-safety analysis: $n_ok ok, $n_fail failed"
exit $status
