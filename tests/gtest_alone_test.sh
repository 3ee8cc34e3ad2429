#!/usr/bin/env bash
# scripts/gtest_alone.sh (gpu_check's lone reruns) against a real GoogleTest binary and a
# stand-in for the verdicts a GPU run can give:
#  * the real binary (argument 1) run with two tests filtered out, one of them
#    parameterized: exactly those two run again, alone, and pass;
#  * a stand-in binary listing a passing, a failing and a crashing test: each verdict
#    named; and once a budget is spent (its tests made slow), the tests left listed as not
#    run.
#   tests/gtest_alone_test.sh BUILD/bin/cascade_kernels_tests
set -uo pipefail
bin=$1
alone=$(dirname "$0")/../scripts/gtest_alone.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

left_out='Cases/AttentionTest.MatchesNaiveDouble/1:QuantizeRoundTripTest.Q8_KBlockSums'
"$bin" --gtest_filter="-$left_out" >"$tmp/run.log" 2>&1 || fail "the filtered run failed"
got=$("$alone" "$bin" "$tmp/run.log" 60)
want=$'alone: OK QuantizeRoundTripTest.Q8_KBlockSums\nalone: OK Cases/AttentionTest.MatchesNaiveDouble/1'
[[ $(sort <<<"$got") == $(sort <<<"$want") ]] || fail "real binary: got [$got], want [$want]"

cat >"$tmp/stand_in" <<'EOF'
#!/usr/bin/env bash
[[ $1 != --gtest_list_tests && -n ${SLOW:-} ]] && sleep 1.2
case $1 in
  --gtest_list_tests) printf 'Suite.\n  Passes\n  Fails\nP/Param.\n  Crashes/0  # GetParam() = 1\n' ;;
  --gtest_filter=Suite.Fails) exit 1 ;;
  --gtest_filter=P/Param.Crashes/0) kill -SEGV $$ ;;
  *) echo "[       OK ] ${1#--gtest_filter=} (0 ms)" ;;
esac
exit 0
EOF
chmod +x "$tmp/stand_in"
echo '[       OK ] Suite.Passes (1 ms)' >"$tmp/stand_in.log"
got=$("$alone" "$tmp/stand_in" "$tmp/stand_in.log" 20 2>&1)
want=$'alone: FAILED Suite.Fails\nalone: CRASHED (exit 139) P/Param.Crashes/0'
[[ $got == "$want" ]] || fail "verdicts: got [$got], want [$want]"
: >"$tmp/empty.log"  # A run that crashed before its first test: every test runs again.
got=$(SLOW=1 "$alone" "$tmp/stand_in" "$tmp/empty.log" 20 1 2>&1)  # A budget of 1 s: the first spends it.
want=$'alone: OK Suite.Passes\nalone: NOT RUN Suite.Fails\nalone: NOT RUN P/Param.Crashes/0'
[[ $got == "$want" ]] || fail "budget: got [$got], want [$want]"
echo "gtest_alone: OK"
