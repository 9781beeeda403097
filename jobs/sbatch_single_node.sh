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
# all GPUs of the node and layertap picks the device of its local rank (SLURM_LOCALID), so do not
# add --gpu-bind or --gpus-per-task. The world is split into world/TP groups of TP consecutive ranks.
#
# The output is complete only when OUT/manifest.json exists (written last by rank 0); a directory
# of shards without it is an interrupted or failed run. Log: layertap-<jobid>.out.
#
#SBATCH --job-name=layertap
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
#SBATCH --output=layertap-%j.out
set -euo pipefail

LAYERTAP=${LAYERTAP:-$(command -v layertap || echo "$PWD/build/src/cli/layertap")}
if [ -z "${TP:-}" ] && [ -f "${CONFIG:-}" ]; then  # TP unset: the job file's 'tp =', if any
  TP=$(sed -nE 's/^[[:space:]]*tp[[:space:]]*=[[:space:]]*([0-9]+).*/\1/p' "$CONFIG" | tail -n 1)
fi
TP=${TP:-${SLURM_NTASKS_PER_NODE:-8}}
args=(extract --backend "${BACKEND:-auto}")
[ -n "${CONFIG:-}" ] && args+=(--config "$CONFIG")
[ -n "${MODEL:-}" ] && args+=(--model "$MODEL")
[ -n "${DATA:-}" ] && args+=(--data "$DATA")
[ -n "${OUT:-}" ] && args+=(--out "$OUT")
[ -n "${CAPTURE:-}" ] && args+=(--capture "$CAPTURE")
args+=(--tp "$TP")
read -r -a extra <<< "${EXTRA:-}"

echo "layertap job ${SLURM_JOB_ID:-?} on ${SLURM_JOB_NODELIST:-?}: ${SLURM_NTASKS:-?} tasks, TP=$TP"
echo "+ srun --mpi=pmix --kill-on-bad-exit=1 $LAYERTAP ${args[*]} ${extra[*]} $*"
srun --mpi=pmix --kill-on-bad-exit=1 "$LAYERTAP" "${args[@]}" "${extra[@]}" "$@"
