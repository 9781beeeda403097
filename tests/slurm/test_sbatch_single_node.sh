#!/usr/bin/env bash
# Submits jobs/sbatch_single_node.sh to a throw-away Slurm cluster on localhost and checks the result.
#
#   tests/slurm/test_sbatch_single_node.sh LAYERTAP_BINARY REPO_ROOT
#
# Starts a private munged (own key and socket), slurmctld and slurmd (generated slurm.conf, all
# state under a temp dir, free ports), submits the job script with 2 tasks, TP 2 and no GPUs
# (sbatch --ntasks-per-node=2 --gpus-per-node=0, which override its #SBATCH lines) on the tiny
# fixture model, waits for it, and checks the output with Debian's python3-h5py. The daemons are
# stopped by pid on every exit. Needs root (the daemons run as root, munged as user munge) and the
# packages slurm-wlm, munge, python3-h5py; fails, never skips, when they are missing.
# Environment: NTASKS (2), TP (NTASKS), TEST_TIMEOUT (240 s for the whole test),
# KEEP_TMP=1 keeps the temp dir.
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: $0 LAYERTAP_BINARY REPO_ROOT" >&2; exit 2; }
LAYERTAP=$(realpath "$1")
REPO=$(realpath "$2")
NTASKS=${NTASKS:-2}
TP=${TP-$NTASKS}
deadline=$((SECONDS + ${TEST_TIMEOUT:-240}))

fail() { echo "test_sbatch_single_node: FAIL: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "must run as root (slurmctld/slurmd run as SlurmUser=root here; CI runs as root)"
for c in munged munge unmunge slurmctld slurmd sbatch scontrol sinfo scancel runuser; do
  command -v "$c" >/dev/null || fail "'$c' not found: install slurm-wlm and munge (tools/install_deps.sh)"
done
/usr/bin/python3 -c 'import h5py, numpy' 2>/dev/null || fail "Debian's python3-h5py/python3-numpy are missing"
id munge >/dev/null 2>&1 || fail "user 'munge' missing (package munge)"
[ -x "$LAYERTAP" ] || fail "layertap binary '$LAYERTAP' is not executable"

T=$(mktemp -d /tmp/layertap-slurm.XXXXXX)
chmod 755 "$T"  # munged (user munge) must reach its socket directory
export SLURM_CONF=$T/slurm/slurm.conf
job="" shown=""
job_state() { timeout 10 scontrol show job -o "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
job_done() { case "$(job_state)" in PENDING|CONFIGURING|RUNNING|COMPLETING|SUSPENDED|"") return 1;; esac; }
cleanup() {
  rc=$?
  set +e
  if [ -n "$job" ] && ! job_done; then timeout 10 scancel "$job"; sleep 2; fi  # a job must not outlive slurmd
  for pf in "$T/slurm/slurmd.pid" "$T/slurm/slurmctld.pid" "$T/munge/munged.pid"; do
    [ -s "$pf" ] || continue
    pid=$(cat "$pf")
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$(basename "$pf" .pid)" ] || continue  # ours, still running
    kill "$pid" 2>/dev/null || continue
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && { echo "pid $pid ($pf) ignored SIGTERM, killing" >&2; kill -9 "$pid"; }
  done
  if [ "$rc" -ne 0 ]; then
    for f in $([ -n "$shown" ] || echo "$T/job.out") "$T"/slurm/log/*.log "$T"/munge/munged.log; do
      [ -f "$f" ] && { echo "----- $f (tail)" >&2; tail -n 40 "$f" >&2; }
    done
  fi
  if [ "${KEEP_TMP:-0}" = 1 ]; then echo "kept $T" >&2; else rm -rf "$T"; fi
  echo "test_sbatch_single_node: $([ "$rc" -eq 0 ] && echo PASS || echo "FAIL (rc $rc)") in $SECONDS s"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# Polls "$@" until it succeeds; fails with $1's message when the test's deadline or $2 seconds pass.
wait_for() {
  local what=$1 secs=$2; shift 2
  local until=$((SECONDS + secs)); [ "$until" -lt "$deadline" ] || until=$deadline
  until "$@" >/dev/null 2>&1; do [ "$SECONDS" -lt "$until" ] || fail "timed out waiting for $what"; sleep 0.5; done
}

# --- munge: private key and socket, as user munge -----------------------------------------------
mkdir -p "$T/munge" "$T/slurm/state" "$T/slurm/spool" "$T/slurm/log" "$T/out"
dd if=/dev/urandom of="$T/munge/munge.key" bs=128 count=1 status=none
chown -R munge:munge "$T/munge"; chmod 755 "$T/munge"; chmod 600 "$T/munge/munge.key"
sock=$T/munge/munge.socket
runuser -u munge -- munged --socket="$sock" --key-file="$T/munge/munge.key" --pid-file="$T/munge/munged.pid" \
  --log-file="$T/munge/munged.log" --seed-file="$T/munge/munged.seed" || fail "munged did not start"
wait_for "munged" 10 bash -c "munge -S '$sock' -n | unmunge -S '$sock'"

# --- slurm.conf: one node (this host, nproc CPUs), one partition, free ports -----------------------
read -r p1 p2 < <(/usr/bin/python3 -c '
import socket; s = [socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1", 0)) for x in s]; print(*[x.getsockname()[1] for x in s])')
host=$(hostname -s)
cat > "$SLURM_CONF" <<EOF
ClusterName=layertap-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$p1
SlurmdPort=$p2
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
StateSaveLocation=$T/slurm/state
SlurmdSpoolDir=$T/slurm/spool
SlurmctldPidFile=$T/slurm/slurmctld.pid
SlurmdPidFile=$T/slurm/slurmd.pid
SlurmctldLogFile=$T/slurm/log/slurmctld.log
SlurmdLogFile=$T/slurm/log/slurmd.log
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
slurmctld || fail "slurmctld did not start"
slurmd || fail "slurmd did not start"
wait_for "node $host idle in sinfo" 60 bash -c "timeout 10 sinfo -h -N -o %t | grep -qx idle"
echo "slurm up after $SECONDS s: $(sinfo -h -N -o '%N %t %c CPUs')"

# --- the job: the script as shipped, adapted by sbatch options and environment only --------------
over=(); [ "$NTASKS" -le "$(nproc)" ] || over=(--overcommit)
cd "$REPO"
job=$(MODEL=tests/fixtures/models/llama DATA=tests/fixtures/data/golden.jsonl OUT=$T/out/hs CAPTURE=0,2,last,final \
  TP=$TP LAYERTAP=$LAYERTAP EXTRA="--threads 1 --store-dtype float32" \
  timeout 20 sbatch --parsable --ntasks-per-node="$NTASKS" --gpus-per-node=0 --time=4 "${over[@]}" \
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
