#!/usr/bin/env bash
# Runs a command in the foreground while some build jobs run in the background at a lower CPU
# priority, and stops whatever of the jobs is left when the command ends.
#
#   scripts/background.sh 'JOB' ['JOB'...] -- CMD [ARGS...]
#
# `make test` uses it to build Consul, polaris-server and istiod, and the Kubernetes tools, while
# vet, lint, unit, fuzz-short and images-test run. Why: from empty caches, `make test` spends about
# 35 of its minutes compiling third-party servers on 2 cores, and the stages leave CPU idle
# (module downloads, single-threaded link steps, tests waiting on real Consul, ZooKeeper and
# Eureka servers). The jobs are the later targets' own: each caches what it builds under a flock
# (scripts/cache-dir.sh), so a target that gets there finds the binary, or waits for the build in
# progress instead of starting a second one. A job that fails costs only time: the target runs
# the same build again and reports its own error.
#
# The jobs run at nice BACKGROUND_NICE (default 10), not 19: the module proxy's stall watchdog
# (scripts/gofetch.sh) stops a go command that used less than a quarter of a second of CPU in 5 s,
# and at nice 19 under a busy foreground a build gets less than that. BACKGROUND_JOBS=off runs the
# command alone. Each job's output goes to <cache>/logs/background-PID-N.log, removed when the job
# succeeds; one line on stderr says when it ended.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/cache-dir.sh
source "$SCRIPT_DIR/cache-dir.sh"

jobs_=()
while [[ $# -gt 0 && "$1" != -- ]]; do
	jobs_+=("$1")
	shift
done
if [[ $# -lt 2 ]]; then
	echo "usage: scripts/background.sh 'JOB' ['JOB'...] -- CMD [ARGS...]" >&2
	exit 2
fi
shift

nice_level=${BACKGROUND_NICE:-10}
if ! [[ "$nice_level" =~ ^[0-9]+$ ]] || ((nice_level > 19)); then
	echo "background.sh: BACKGROUND_NICE=$nice_level: set it to a whole number from 0 to 19" >&2
	exit 2
fi

# Every job runs in a session of its own (setsid) so that stopping it stops the go build and the
# compilers under it. The session's autogroup is given the same nice level (see the job below). Without setsid there is no clean way to do that: run the command alone.
if [[ "${BACKGROUND_JOBS:-on}" == off ]] || ! command -v setsid >/dev/null 2>&1; then
	exec "$@"
fi

logdir="$(galleon_cache_dir)/logs"
mkdir -p "$logdir"
pids=()
stop_jobs() {
	local pid
	for pid in "${pids[@]}"; do
		kill -TERM -- "-$pid" 2>/dev/null || true
	done
}
trap stop_jobs EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for i in "${!jobs_[@]}"; do
	job=${jobs_[$i]}
	log="$logdir/background-$$-$((i + 1)).log"
	# The job's shell reports its own end; the trap above reaches it and everything it started.
	# shellcheck disable=SC2016 # expanded by the inner shell
	setsid bash -c '
		job=$1 log=$2 nice_level=$3
		start=$SECONDS
		# A new session is a new scheduling autogroup on Linux, and nice counts only within
		# one: without this line the jobs got as much CPU as the whole foreground.
		echo "$nice_level" 2>/dev/null >/proc/self/autogroup || true
		if nice -n "$nice_level" bash -c "$job" >"$log" 2>&1; then
			echo "background: $job: done in $((SECONDS - start)) s" >&2
			rm -f "$log"
		else
			echo "background: $job: failed after $((SECONDS - start)) s (log $log); the target that needs it will build it again" >&2
		fi' background "$job" "$log" "$nice_level" </dev/null &
	pids+=("$!")
	echo "background: started $job at nice $nice_level (log $log)" >&2
done

"$@"
