#!/usr/bin/env bash
# Graceful stop, requeue and resume of jobs/sbatch_single_node.sh under a throw-away Slurm cluster
# on localhost (tests/slurm/slurm_cluster.sh).
#
#   tests/slurm/test_scancel_signal.sh LAYERTAP_BINARY REPO_ROOT
#
# Submits the job script with 2 tasks, TP 1 (two data-parallel groups, which must agree to stop;
# also faster than TP 2 on two cores), no GPUs, on the tiny fixture model and a generated dataset
# long enough to run a while (3000 seeded samples of 100-250 token ids). Once the job is RUNNING
# and has logged a progress line, `scancel --signal=USR1 JOBID` stops it: without --full or
# --batch, scancel signals the processes of the job's steps (the layertap ranks), not the batch
# shell. The test checks that srun reports both tasks exiting 75, that manifest.json then says
# "complete": false and stopped_by SIGUSR1, that the script requeued the job itself (scontrol
# requeue; slurm_cluster.sh's slurm.conf restarts a requeued job after about 6 s instead of 2
# minutes), and that the restarted job resumed (kept shards) and completed: manifest complete,
# samples in input order, tokens equal to the JSONL (check_output.py). The job's --time=10 with
# --signal=USR1@60 keeps the time-limit warning out of the test. Needs root, slurm-wlm, munge,
# python3-h5py; fails, never skips, without them.
# Environment: TEST_TIMEOUT (200 s for the whole test), KEEP_TMP=1 keeps the temp dir.
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: $0 LAYERTAP_BINARY REPO_ROOT" >&2; exit 2; }
LAYERTAP=$(realpath "$1")
REPO=$(realpath "$2")
TEST_NAME=test_scancel_signal TEST_TIMEOUT=${TEST_TIMEOUT:-200}
source "$REPO/tests/slurm/slurm_cluster.sh"
[ -x "$LAYERTAP" ] || fail "layertap binary '$LAYERTAP' is not executable"
slurm_cluster_start

/usr/bin/python3 - "$T/data.jsonl" <<'EOF'
import json, random, sys
r = random.Random(20240611)
with open(sys.argv[1], "w") as f:
    for i in range(3000):
        f.write(json.dumps({"input_ids": [r.randrange(150) for _ in range(r.randint(100, 250))], "id": f"s{i}"}) + "\n")
EOF

over=(); [ 2 -le "$(nproc)" ] || over=(--overcommit)
cd "$REPO"
job=$(MODEL=tests/fixtures/models/llama DATA=$T/data.jsonl OUT=$T/out/hs CAPTURE=0,last,final TP=1 LAYERTAP=$LAYERTAP \
  EXTRA="--max-batch-tokens 512 --threads 1 --progress-seconds 0.2 --shard-size-mib 16" \
  timeout 20 sbatch --parsable --ntasks-per-node=2 --gpus-per-node=0 --time=10 --signal=USR1@60 "${over[@]}" \
  --output="$T/job.out" jobs/sbatch_single_node.sh) || fail "sbatch failed"
echo "submitted job $job (2 tasks, TP 1)"
running_with_progress() { [ "$(job_state)" = RUNNING ] && grep -q '] info: progress' "$T/job.out"; }
wait_for "job $job to run and log progress" 90 running_with_progress
timeout 10 scancel --signal=USR1 "$job" || fail "scancel --signal=USR1 $job failed"
echo "sent SIGUSR1 to job $job at $SECONDS s"

# The stopped run's manifest (replaced atomically, so a copy is whole) until the restart replaces it.
stopped_manifest() {
  cp "$T/out/hs/manifest.json" "$T/stopped.json" 2>/dev/null &&
    /usr/bin/python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["complete"] is not False)' "$T/stopped.json"
}
wait_for "an incomplete manifest" 60 stopped_manifest
/usr/bin/python3 - "$T/stopped.json" <<'EOF' || fail "the stopped run's manifest is wrong"
import json, sys
m = json.load(open(sys.argv[1]))
stopped_by, n = m["run"].get("stopped_by"), m["totals"]["samples"]
print(f"stopped run: complete={m['complete']}, stopped_by={stopped_by}, {n} samples in {len(m['shards'])} shards")
sys.exit(not (stopped_by == "SIGUSR1" and 0 < n < 3000))
EOF

wait_for "job $job to be requeued and finish" 150 job_done
state=$(job_state)
restarts=$(timeout 10 scontrol show job -o "$job" | grep -o 'Restarts=[0-9]*' | cut -d= -f2)
echo "job $job: $state, restarts $restarts, after $SECONDS s"
echo "----- job output (both runs)"; grep -v '] info: progress' "$T/job.out"; echo "-----"; shown=1
[ "$state" = COMPLETED ] || fail "job $job ended $state ($(scontrol show job -o "$job" | grep -o 'ExitCode=[0-9:]*'))"
[ "$restarts" = 1 ] || fail "job $job restarted $restarts times, expected 1"
exited_75() { grep -Eq "tasks? ([0-9]+-)?$1(-[0-9]+)?: Exited with exit code 75" "$T/job.out"; }  # srun: "tasks 0-1: ..."
if ! { exited_75 0 && exited_75 1; }; then fail "srun did not report both tasks exiting 75"; fi
grep -q 'requeueing job' "$T/job.out" || fail "the script did not requeue the job"
grep -q "layertap job $job (restart 1)" "$T/job.out" || fail "no log of the restarted job"
grep -Eq 'samples \([1-9][0-9]* kept from the interrupted run\)' "$T/job.out" || fail "the restarted job did not resume"

timeout 60 /usr/bin/python3 "$REPO/tests/slurm/check_output.py" "$T/out/hs" "$T/data.jsonl" \
  tests/fixtures/models/llama --world-size 2 || fail "output check failed"
