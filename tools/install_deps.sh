#!/usr/bin/env bash
# Installs the Debian packages layertap builds and tests with (Debian 12; run as root or via sudo).
# The CUDA toolkit is optional: when nvcc is on PATH the CUDA kernels are built too.
set -euo pipefail
packages=(
  cmake g++ make pkg-config
  libopenmpi-dev openmpi-bin          # MPI: ranks, sharding, CPU tensor parallelism
  libhdf5-dev hdf5-tools              # shards; h5ls/h5dump in tests
  liblz4-dev libzstd-dev zlib1g-dev   # --compress: chunk codecs (layertap encodes chunks itself)
  hdf5-filter-plugin                  # the LZ4 filter for h5ls/h5dump/h5py reading lz4 shards
  libboost-program-options-dev        # command line and job files
  libboost-context-dev                # the simulated GPU's fibers (LAYERTAP_CUDA_SIM)
  libopenblas-dev                     # CPU backend matrix products
  nlohmann-json3-dev libssl-dev       # JSON; SHA-256
  libre2-dev                          # linear-time regexes for the patterns a model's config holds
  libgtest-dev                        # unit tests
  python3 python3-h5py python3-numpy  # end-to-end tests read the output as users do
  slurm-wlm munge                     # tests/slurm: a throw-away Slurm cluster on localhost for jobs/
  procps                              # pgrep: the signal tests find the rank processes
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  echo "installing: ${missing[*]}"
  # Another apt (unattended-upgrades, a second shell) may hold the locks: wait for them, up to
  # 10 minutes, instead of failing at once.
  wait_s=${APT_LOCK_WAIT_S:-600}
  for ((waited = 0; ; waited += 5)); do
    $SUDO apt-get -o DPkg::Lock::Timeout="$wait_s" update -q && break
    ((waited < wait_s)) || { echo "install_deps: apt-get update failed (lock held for ${wait_s} s?)" >&2; exit 1; }
    echo "install_deps: apt-get update failed; retrying in 5 s (another apt may hold its lock)"
    sleep 5
  done
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout="$wait_s" install -y -q \
    --no-install-recommends "${missing[@]}"
fi
