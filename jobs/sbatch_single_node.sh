#!/usr/bin/env bash
# layertap on one node: one task (rank) per GPU, tensor parallel inside the node.
#
# Submit from the directory that relative paths are meant from (the job runs there):
#   MODEL=/models/Llama-3.1-8B-Instruct DATA=train.jsonl OUT=/scratch/hs CAPTURE=eagle3 \
#     sbatch jobs/sbatch_single_node.sh [more layertap extract options...]
#   CONFIG=jobs/example-llama3-8b-eagle3.conf sbatch jobs/sbatch_single_node.sh
# Options on the sbatch command line override the #SBATCH lines below, e.g. a 4-GPU node:
#   sbatch --ntasks-per-node=4 --gpus-per-node=4 jobs/sbatch_single_node.sh
#
# Environment (sbatch exports the submitting shell's environment to the job):
#   MODEL, DATA, OUT  --model/--data/--out; each may instead come from CONFIG
#   CONFIG            job file (key = value lines, same names as the options); the command line wins
#   CAPTURE           --capture (eagle3, or e.g. 2,16,29,final); unset: CONFIG's or layertap's default
#   TP                tensor-parallel size (default: CONFIG's 'tp =' if it has one, else the tasks
#                     per node, i.e. the whole node = 8); passed as --tp
#   BACKEND           --backend (default auto)
#   EXTRA             more options, split on spaces (e.g. "--max-batch-tokens 16384"); arguments
#                     after the script name are passed on too
#   LAYERTAP          the binary (default: layertap on PATH, else ./build/src/cli/layertap)
#
# Launch: srun --mpi=pmix (Slurm starts the Open MPI ranks itself; no mpirun). Every task sees
# all GPUs of the node and layertap picks the device of its local rank; with --gpus-per-task=1,
# --gpu-bind=single:1 or a site default of --gpu-bind=closest each task sees one GPU and uses it.
# Either way the node's ranks compare their GPUs' PCI bus ids and two on one GPU are refused.
# The world is split into world/TP groups of TP consecutive ranks.
#
# Time limit and requeue: layertap always gets --resume, so a (re)started job keeps the complete
# shards already in OUT and computes the rest (a fresh OUT simply starts, a complete one exits 0 at
# once; --overwrite cannot be added: to start over, remove OUT). --signal=USR1@300 has Slurm send
# SIGUSR1 to every process of the job steps (the layertap ranks), not to this batch shell, 300 s (up
# to 60 s earlier) before the time limit; raise it when a batch plus closing a shard takes longer,
# and do not write B:USR1 (that signals only this shell). `scancel --signal=USR1 <jobid>` does the
# same at any time (--full also signals this shell, which ignores it; --batch only the shell: no
# effect). The ranks stop after the batch in flight, rank 0 writes manifest.json with "complete":
# false, and they exit 75; the script then runs `scontrol requeue`: the job goes back to the queue,
# Slurm starts it again (not before AuthInfo's cred_expire, 120 s by default, has passed), this
# script restarts from the top and layertap resumes; the log is appended to. If the requeue fails,
# the job ends with exit code 75: resubmit it to resume. Preemption with PreemptMode=REQUEUE
# requeues the job by itself; the SIGTERM it sends first stops layertap the same way when the grace
# time allows, and the restarted job resumes from the shards closed before.
#
# The output is complete only when OUT/manifest.json says "complete": true (written last by rank 0);
# shards without it, or "complete": false, are an interrupted or failed run. Log: layertap-<jobid>.out.
#
#SBATCH --job-name=layertap
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
#SBATCH --output=layertap-%j.out
#SBATCH --open-mode=append
#SBATCH --signal=USR1@300
#SBATCH --requeue
set -euo pipefail
trap : USR1  # `scancel --full --signal=USR1` reaches this shell too: without a trap it would die

LAYERTAP=${LAYERTAP:-$(command -v layertap || echo "$PWD/build/src/cli/layertap")}
if [ -z "${TP:-}" ] && [ -f "${CONFIG:-}" ]; then  # TP unset: the job file's 'tp =', if any
  TP=$(sed -nE 's/^[[:space:]]*tp[[:space:]]*=[[:space:]]*([0-9]+).*/\1/p' "$CONFIG" | tail -n 1)
fi
TP=${TP:-${SLURM_NTASKS_PER_NODE:-8}}
args=(extract --backend "${BACKEND:-auto}" --resume)
[ -n "${CONFIG:-}" ] && args+=(--config "$CONFIG")
[ -n "${MODEL:-}" ] && args+=(--model "$MODEL")
[ -n "${DATA:-}" ] && args+=(--data "$DATA")
[ -n "${OUT:-}" ] && args+=(--out "$OUT")
[ -n "${CAPTURE:-}" ] && args+=(--capture "$CAPTURE")
args+=(--tp "$TP")
read -r -a extra <<< "${EXTRA:-}"

echo "layertap job ${SLURM_JOB_ID:-?} (restart ${SLURM_RESTART_COUNT:-0}) on ${SLURM_JOB_NODELIST:-?}: ${SLURM_NTASKS:-?} tasks, TP=$TP"
echo "+ srun --mpi=pmix --kill-on-bad-exit=1 $LAYERTAP ${args[*]} ${extra[*]} $*"
rc=0
srun --mpi=pmix --kill-on-bad-exit=1 "$LAYERTAP" "${args[@]}" "${extra[@]}" "$@" || rc=$?
if [ "$rc" -eq 75 ]; then  # stopped by SIGUSR1/SIGTERM: requeue; the restarted job resumes
  echo "layertap stopped early (exit 75): requeueing job $SLURM_JOB_ID; it restarts and resumes"
  scontrol requeue "$SLURM_JOB_ID" || echo "scontrol requeue failed: resubmit the job to resume" >&2
fi
exit "$rc"
