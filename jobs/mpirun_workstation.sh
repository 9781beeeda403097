#!/usr/bin/env bash
# layertap on one workstation without Slurm: mpirun, one rank per GPU, tensor parallel across them.
#
#   MODEL=/models/Llama-3.1-8B-Instruct DATA=train.jsonl OUT=hs CAPTURE=eagle3 \
#     jobs/mpirun_workstation.sh [more layertap extract options...]
#   CONFIG=jobs/example-tiny.conf NP=1 jobs/mpirun_workstation.sh   # from the repo root
#
# Environment:
#   NP                ranks (default: GPUs listed by `nvidia-smi -L`, or 1 without nvidia-smi)
#   TP                tensor-parallel size (default: CONFIG's 'tp =' if it has one, else NP); NP/TP
#                     data-parallel groups of TP consecutive ranks; passed as --tp
#   MODEL, DATA, OUT  --model/--data/--out; each may instead come from CONFIG
#   CONFIG            job file (key = value lines, same names as the options); the command line wins
#   CAPTURE           --capture (eagle3, or e.g. 2,16,29,final); unset: CONFIG's or layertap's default
#   BACKEND           --backend (default auto)
#   EXTRA             more options, split on spaces (e.g. "--max-batch-tokens 16384"); arguments
#                     after the script name are passed on too
#   LAYERTAP          the binary (default: layertap on PATH, else ./build/src/cli/layertap)
#   MPIRUN_ARGS       more mpirun options, split on spaces (e.g. "--oversubscribe" for NP > cores)
#
# Ranks are not bound to cores (--bind-to none: each rank also runs a writer thread and, on the
# CPU backend, OpenBLAS threads; set --threads to share the cores). Every rank sees all GPUs and
# layertap picks the device of its local rank (OMPI_COMM_WORLD_LOCAL_RANK). As root, mpirun gets
# --allow-run-as-root.
#
# layertap always gets --resume: rerunning the same command continues an interrupted run in OUT (a
# fresh OUT simply starts, a complete one exits 0 at once; --overwrite cannot be added: to start
# over, remove OUT). To stop gracefully, send SIGUSR1 to mpirun (this script's pid: it execs mpirun):
#   kill -USR1 <pid>
# Open MPI forwards SIGUSR1 (and SIGUSR2) to every rank: each stops after the batch in flight, rank 0
# writes manifest.json with "complete": false, and mpirun exits 75: interrupted, rerun to resume.
# Ctrl-C or SIGTERM reaches mpirun only (each rank has its own process group); mpirun then sends the
# ranks SIGTERM and SIGKILL about a second later (odls_base_sigkill_timeout), usually before a batch
# ends, and exits 1 even when they stopped in time. The shards closed before remain; a rerun resumes.
#
# The output is complete only when OUT/manifest.json says "complete": true (written last by rank 0);
# shards without it, or "complete": false, are an interrupted or failed run.
set -euo pipefail

LAYERTAP=${LAYERTAP:-$(command -v layertap || echo "$PWD/build/src/cli/layertap")}
if [ -z "${NP:-}" ]; then
  NP=$( (command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -c '^GPU ') || true)
  [ "${NP:-0}" -gt 0 ] 2>/dev/null || NP=1
fi
if [ -z "${TP:-}" ] && [ -f "${CONFIG:-}" ]; then  # TP unset: the job file's 'tp =', if any
  TP=$(sed -nE 's/^[[:space:]]*tp[[:space:]]*=[[:space:]]*([0-9]+).*/\1/p' "$CONFIG" | tail -n 1)
fi
TP=${TP:-$NP}
args=(extract --backend "${BACKEND:-auto}" --resume)
[ -n "${CONFIG:-}" ] && args+=(--config "$CONFIG")
[ -n "${MODEL:-}" ] && args+=(--model "$MODEL")
[ -n "${DATA:-}" ] && args+=(--data "$DATA")
[ -n "${OUT:-}" ] && args+=(--out "$OUT")
[ -n "${CAPTURE:-}" ] && args+=(--capture "$CAPTURE")
args+=(--tp "$TP")
read -r -a extra <<< "${EXTRA:-}"
read -r -a mpi <<< "${MPIRUN_ARGS:-}"
[ "$(id -u)" -eq 0 ] && mpi=(--allow-run-as-root "${mpi[@]}")

echo "+ mpirun -np $NP --bind-to none ${mpi[*]} $LAYERTAP ${args[*]} ${extra[*]} $*"
exec mpirun -np "$NP" --bind-to none "${mpi[@]}" "$LAYERTAP" "${args[@]}" "${extra[@]}" "$@"
