#!/usr/bin/env bash
# Submits jobs/sbatch_single_node.sh to a throw-away Slurm cluster on localhost and checks the result.
#
#   tests/slurm/test_sbatch_single_node.sh LAYERTAP_BINARY REPO_ROOT
#
# Starts a private Slurm (tests/slurm/slurm_cluster.sh: munged, slurmctld, slurmd, all state in a
# temp dir, stopped by pid on every exit), submits the job script with 2 tasks, TP 2 and no GPUs
# (sbatch --ntasks-per-node=2 --gpus-per-node=0, which override its #SBATCH lines; --signal=USR1@10
# keeps its time-limit warning, 300 s, from stopping this 4-minute job at once) on the tiny fixture
# model, waits for it, and checks the output with Debian's python3-h5py. Needs root (the daemons
# run as root, munged as user munge) and the packages slurm-wlm, munge, python3-h5py; fails, never
# skips, when they are missing.
# Environment: NTASKS (2), TP (NTASKS), TEST_TIMEOUT (240 s for the whole test),
# KEEP_TMP=1 keeps the temp dir.
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: $0 LAYERTAP_BINARY REPO_ROOT" >&2; exit 2; }
LAYERTAP=$(realpath "$1")
REPO=$(realpath "$2")
NTASKS=${NTASKS:-2}
TP=${TP-$NTASKS}
TEST_NAME=test_sbatch_single_node
source "$REPO/tests/slurm/slurm_cluster.sh"
[ -x "$LAYERTAP" ] || fail "layertap binary '$LAYERTAP' is not executable"
slurm_cluster_start

# --- the job: the script as shipped, adapted by sbatch options and environment only --------------
over=(); [ "$NTASKS" -le "$(nproc)" ] || over=(--overcommit)
cd "$REPO"
job=$(MODEL=tests/fixtures/models/llama DATA=tests/fixtures/data/golden.jsonl OUT=$T/out/hs CAPTURE=0,2,last,final \
  TP=$TP LAYERTAP=$LAYERTAP EXTRA="--threads 1 --store-dtype float32" \
  timeout 20 sbatch --parsable --ntasks-per-node="$NTASKS" --gpus-per-node=0 --time=4 --signal=USR1@10 "${over[@]}" \
  --output="$T/job.out" jobs/sbatch_single_node.sh) || fail "sbatch failed"
echo "submitted job $job ($NTASKS tasks, TP=$TP)"
wait_for "job $job to finish" 240 job_done
state=$(job_state)
echo "job $job: $state after $SECONDS s"
echo "----- job output"; cat "$T/job.out"; echo "-----"; shown=1
[ "$state" = COMPLETED ] || fail "job $job ended $state ($(scontrol show job -o "$job" | grep -o 'ExitCode=[0-9:]*'))"
grep -q "srun --mpi=pmix" "$T/job.out" || fail "the job did not launch with srun --mpi=pmix"

# --- the output, read with Debian's h5py --------------------------------------------------------
timeout 60 /usr/bin/python3 "$REPO/tests/slurm/check_output.py" "$T/out/hs" tests/fixtures/data/golden.jsonl \
  tests/fixtures/models/llama --world-size "$NTASKS" || fail "output check failed"
