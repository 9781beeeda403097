# A throw-away Slurm cluster on localhost for the tests in this directory; sourced, not run.
#
#   TEST_NAME=test_x; source tests/slurm/slurm_cluster.sh; slurm_cluster_start
#
# slurm_cluster_start checks the prerequisites (root, slurm-wlm, munge, Debian's python3-h5py; it
# fails, never skips, without them), makes the temp dir $T, starts a private munged (own key and
# socket, as user munge), slurmctld and slurmd (generated slurm.conf: this host as the one node,
# nproc CPUs, free ports, all state under $T; a requeued job becomes eligible after cred_expire + 1
# = 6 s, not 121, and the main scheduler, which then starts it, runs every 2 s, not 60) and exports
# SLURM_CONF. On every exit it cancels $job if still queued or running, stops the daemons by
# pid, prints the tails of $T/job.out (unless $shown is set) and of the daemons' logs on failure,
# removes $T (KEEP_TMP=1 keeps it) and prints "$TEST_NAME: PASS|FAIL in N s".
# Also defined: fail MSG; wait_for WHAT SECS CMD... (polls CMD until it succeeds, bounded by SECS
# and by $deadline = TEST_TIMEOUT seconds, default 240, after sourcing); job_state (of $job);
# job_done (whether $job has left the queue for good). The caller sets `job` once it has submitted.

deadline=$((SECONDS + ${TEST_TIMEOUT:-240}))
job="" shown=""

fail() { echo "$TEST_NAME: FAIL: $*" >&2; exit 1; }
job_state() { timeout 10 scontrol show job -o "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
job_done() {
  case "$(job_state)" in PENDING | CONFIGURING | RUNNING | COMPLETING | SUSPENDED | REQUEUED | "") return 1 ;; esac
}
wait_for() {
  local what=$1 secs=$2; shift 2
  local until=$((SECONDS + secs)); [ "$until" -lt "$deadline" ] || until=$deadline
  until "$@" >/dev/null 2>&1; do [ "$SECONDS" -lt "$until" ] || fail "timed out waiting for $what"; sleep 0.5; done
}

_slurm_cluster_cleanup() {
  local rc=$? pf pid f
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
  echo "$TEST_NAME: $([ "$rc" -eq 0 ] && echo PASS || echo "FAIL (rc $rc)") in $SECONDS s"
  exit "$rc"
}

slurm_cluster_start() {
  [ "$(id -u)" -eq 0 ] || fail "must run as root (slurmctld/slurmd run as SlurmUser=root here; CI runs as root)"
  local c
  for c in munged munge unmunge slurmctld slurmd sbatch scontrol sinfo scancel runuser; do
    command -v "$c" >/dev/null || fail "'$c' not found: install slurm-wlm and munge (tools/install_deps.sh)"
  done
  /usr/bin/python3 -c 'import h5py, numpy' 2>/dev/null || fail "Debian's python3-h5py/python3-numpy are missing"
  id munge >/dev/null 2>&1 || fail "user 'munge' missing (package munge)"

  T=$(mktemp -d /tmp/layertap-slurm.XXXXXX)
  chmod 755 "$T"  # munged (user munge) must reach its socket directory
  export SLURM_CONF=$T/slurm/slurm.conf
  trap _slurm_cluster_cleanup EXIT
  trap 'exit 130' INT TERM

  # munge: private key and socket, as user munge
  mkdir -p "$T/munge" "$T/slurm/state" "$T/slurm/spool" "$T/slurm/log" "$T/out"
  dd if=/dev/urandom of="$T/munge/munge.key" bs=128 count=1 status=none
  chown -R munge:munge "$T/munge"; chmod 755 "$T/munge"; chmod 600 "$T/munge/munge.key"
  local sock=$T/munge/munge.socket
  runuser -u munge -- munged --socket="$sock" --key-file="$T/munge/munge.key" --pid-file="$T/munge/munged.pid" \
    --log-file="$T/munge/munged.log" --seed-file="$T/munge/munged.seed" || fail "munged did not start"
  wait_for "munged" 10 bash -c "munge -S '$sock' -n | unmunge -S '$sock'"

  # slurm.conf: one node (this host, nproc CPUs), one partition, free ports
  local p1 p2 host
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
AuthInfo=socket=$sock,cred_expire=5
SchedulerParameters=sched_interval=2
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
}
