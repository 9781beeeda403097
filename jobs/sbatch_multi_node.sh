#!/usr/bin/env bash
# layertap on several nodes: one task (rank) per GPU, tensor parallel inside each node, data
# parallel across nodes (and across TP groups inside a node when TP < GPUs per node).
#
# Submit from the directory that relative paths are meant from (the job runs there); MODEL, DATA
# and OUT must be on a file system that every node sees:
#   MODEL=/models/Llama-3.1-70B-Instruct DATA=/shared/train.jsonl OUT=/shared/hs CAPTURE=eagle3 \
#     sbatch --nodes=4 jobs/sbatch_multi_node.sh [more layertap extract options...]
#   CONFIG=jobs/example-llama3-8b-eagle3.conf sbatch --nodes=2 jobs/sbatch_multi_node.sh  # its tp = 1: 16 replicas
# Options on the sbatch command line override the #SBATCH lines below (--nodes,
# --ntasks-per-node and --gpus-per-node together for nodes with another GPU count).
#
# Environment (sbatch exports the submitting shell's environment to the job):
#   MODEL, DATA, OUT  --model/--data/--out; each may instead come from CONFIG
#   CONFIG            job file (key = value lines, same names as the options); the command line wins
#   CAPTURE           --capture (eagle3, or e.g. 2,16,29,final); unset: CONFIG's or layertap's default
#   TP                tensor-parallel size (default: CONFIG's 'tp =' if it has one, else the tasks
#                     per node: one TP group per node); must divide the tasks per node so that no
#                     group spans two nodes; passed as --tp
#   BACKEND           --backend (default auto)
#   EXTRA             more options, split on spaces (e.g. "--max-batch-tokens 16384"); arguments
#                     after the script name are passed on too
#   LAYERTAP          the binary (default: layertap on PATH, else ./build/src/cli/layertap)
#
# Launch: srun --mpi=pmix --distribution=block (ranks numbered node by node, so TP consecutive
# ranks share a node). Every task sees all GPUs of its node and layertap picks the device of its
# local rank (SLURM_LOCALID), so do not add --gpu-bind or --gpus-per-task.
#
# The output is complete only when OUT/manifest.json exists (written last by rank 0); a directory
# of shards without it is an interrupted or failed run. Log: layertap-<jobid>.out.
#
#SBATCH --job-name=layertap
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
#SBATCH --output=layertap-%j.out
set -euo pipefail

LAYERTAP=${LAYERTAP:-$(command -v layertap || echo "$PWD/build/src/cli/layertap")}
per_node=${SLURM_NTASKS_PER_NODE:-8}
if [ -z "${TP:-}" ] && [ -f "${CONFIG:-}" ]; then  # TP unset: the job file's 'tp =', if any
  TP=$(sed -nE 's/^[[:space:]]*tp[[:space:]]*=[[:space:]]*([0-9]+).*/\1/p' "$CONFIG" | tail -n 1)
fi
TP=${TP:-$per_node}
if [ $((per_node % TP)) -ne 0 ]; then
  echo "error: TP=$TP does not divide the $per_node tasks per node (a TP group must stay on one node)" >&2
  exit 2
fi
args=(extract --backend "${BACKEND:-auto}")
[ -n "${CONFIG:-}" ] && args+=(--config "$CONFIG")
[ -n "${MODEL:-}" ] && args+=(--model "$MODEL")
[ -n "${DATA:-}" ] && args+=(--data "$DATA")
[ -n "${OUT:-}" ] && args+=(--out "$OUT")
[ -n "${CAPTURE:-}" ] && args+=(--capture "$CAPTURE")
args+=(--tp "$TP")
read -r -a extra <<< "${EXTRA:-}"

echo "layertap job ${SLURM_JOB_ID:-?} on ${SLURM_JOB_NODELIST:-?}: ${SLURM_NNODES:-?} nodes x $per_node tasks, TP=$TP"
echo "+ srun --mpi=pmix --distribution=block --kill-on-bad-exit=1 $LAYERTAP ${args[*]} ${extra[*]} $*"
srun --mpi=pmix --distribution=block --kill-on-bad-exit=1 "$LAYERTAP" "${args[@]}" "${extra[@]}" "$@"
