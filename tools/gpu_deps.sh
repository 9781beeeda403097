#!/usr/bin/env bash
# Run HERE (a Debian 12 machine with apt and network), not on the GPU machine: downloads the Debian
# packages that the core-only CUDA build needs and a bare GPU image may lack (nothing can be fetched
# there) into .gpu-deps/ (git-ignored). tools/gpu_check.sh unpacks them into a private prefix,
# never into /, and only for what the machine itself lacks. The device call carries the folder:
#
#   bash tools/gpu_deps.sh             # then: run(command="bash tools/gpu_check.sh", carry=[".gpu-deps"])
#
# OpenBLAS and OpenSSL are linked statically from the -dev packages' libopenblas.a and libcrypto.a
# (no libgfortran, no libssl3, no LD_LIBRARY_PATH needed at run time); nlohmann_json is
# header-only; GoogleTest's and RE2's -dev packages hold static libraries. The binaries then need glibc >= 2.34
# (the newest GLIBC_ symbol version a program linked with these archives needs; checked below).
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=.gpu-deps
PACKAGES=(
  libopenblas-pthread-dev # cblas.h, libopenblas.a (pthread flavour, as Debian's libopenblas-dev picks)
  libssl-dev              # openssl/*.h, libcrypto.a
  nlohmann-json3-dev      # nlohmann/json.hpp, nlohmann_jsonConfig.cmake
  libgtest-dev            # gtest/*.h, libgtest.a, libgtest_main.a, GTestConfig.cmake
  libre2-dev              # re2/re2.h, libre2.a (linear-time regexes of quantization_config)
  libboost1.74-dev        # boost/*.hpp, BoostConfig.cmake (layertap_bench's option table)
  libboost-program-options1.74-dev  # libboost_program_options.a and its CMake config
  libboost-context1.74-dev  # the simulated GPU's fibers: gpu_check's cost-report build
)

command -v apt-get >/dev/null || { echo "gpu_deps.sh: needs apt-get (a Debian 12 machine)" >&2; exit 1; }
rm -rf "$DIR"
mkdir -p "$DIR"
# apt-get download runs as the _apt user when it can; a world-writable temporary folder avoids the
# "unsandboxed" warning and permission errors, then the files move into place.
tmp=$(mktemp -d)
chmod 777 "$tmp"
if ! (cd "$tmp" && apt-get download "${PACKAGES[@]}"); then
  echo "apt-get download failed; refreshing the package lists and trying again"
  apt-get update -qq
  (cd "$tmp" && apt-get download "${PACKAGES[@]}")
fi
mv "$tmp"/*.deb "$DIR"/
rm -rf "$tmp"

# Record what is there. Best effort: link a probe against the static archives, as the device build
# will, and report the newest GLIBC_ symbol version it needs (the device's glibc must have it).
(cd "$DIR" && ls -1 *.deb >MANIFEST)
x=$(mktemp -d)
for f in "$DIR"/*.deb; do dpkg-deb -x "$f" "$x/root"; done
cat >"$x/probe.c" <<'EOF_C'
#include <cblas.h>
#include <openssl/evp.h>
int main(void) {
  float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4];
  unsigned char md[32];
  unsigned int n = 0;
  openblas_set_num_threads(2);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2, 2, 2, 1, a, 2, b, 2, 0, c, 2);
  EVP_Digest("abc", 3, md, &n, EVP_sha256(), NULL);
  return (c[3] == 4 && n == 32 && md[0] == 0xba) ? 0 : 1;
}
EOF_C
r="$x/root/usr"
ma=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
if gcc "$x/probe.c" -o "$x/probe" -I"$r/include" -I"$r/include/$ma" -I"$r/include/$ma/openblas-pthread" \
  "$r/lib/$ma/openblas-pthread/libopenblas.a" "$r/lib/$ma/libcrypto.a" -lpthread -lm -ldl 2>"$x/err" && "$x/probe"; then
  echo "static OpenBLAS + libcrypto probe: links and runs; needs $(objdump -T "$x/probe" | grep -o 'GLIBC_2\.[0-9]*' | sort -uV | tail -n 1)"
else
  echo "WARNING: the static OpenBLAS + libcrypto probe failed here:"; cat "$x/err"
fi
rm -rf "$x"

echo "--- $DIR:"
ls -l "$DIR"
echo "total: $(du -sh "$DIR" | cut -f1) ($(du -sb "$DIR" | cut -f1) bytes; the device call carries at most 64 MiB)"
