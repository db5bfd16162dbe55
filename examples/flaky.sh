#!/bin/sh
# flaky.sh: a stand-in for a flaky job, for trying out `retryq run`.
#
# It fails with exit status 75 (EX_TEMPFAIL) on its first two runs and
# succeeds on the third. The run count is kept in a state file: the first
# argument, else $FLAKY_STATE, else a file in $TMPDIR named after the parent
# process, so that every `retryq run` starts afresh. The file is removed on
# success. Set FLAKY_FAILURES to change how many runs fail.
#
#   go run ./cmd/retryq run --attempts 5 --delay 0.2 -- ./examples/flaky.sh
set -eu

state=${1:-${FLAKY_STATE:-${TMPDIR:-/tmp}/retryq-flaky.$PPID}}
failures=${FLAKY_FAILURES:-2}

runs=0
if [ -f "$state" ]; then
	runs=$(cat "$state")
fi
runs=$((runs + 1))

if [ "$runs" -le "$failures" ]; then
	echo "$runs" >"$state"
	echo "flaky: run $runs: temporary failure, try again later" >&2
	exit 75
fi

rm -f "$state"
echo "flaky: run $runs: done"
