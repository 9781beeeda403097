// libFuzzer target: the safetensors header parser and layout validator (model/safetensors.cpp).
// The input is written to a file as-is (8-byte little-endian header length, JSON header, data)
// and opened with layertap::Checkpoint, as the loader does; when it opens, every tensor the header
// names is looked up and the float ones are converted, so the offsets the validator accepted are
// read. A layertap::Error is the expected outcome for a bad file; any other exception, a crash, a
// sanitizer report or a descriptor of the file left open once the Checkpoint is gone (LeakSanitizer
// does not see file descriptors) is a finding.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "model/safetensors.hpp"

namespace {

// Scratch files of processes that are gone (a crash skips the atexit clean-up).
void remove_stale_scratch_files(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    int pid = 0;
    if (std::sscanf(name.c_str(), "layertap_fuzz_%d.safetensors", &pid) == 1 && pid > 0 &&
        ::kill(pid, 0) != 0 && errno == ESRCH)
      std::filesystem::remove(entry.path(), ec);
  }
}

// One scratch file per process (libFuzzer's -jobs/-fork run several), in memory where possible.
const std::string& scratch_path() {
  static const std::string path = [] {
    const char* dir = std::getenv("LAYERTAP_FUZZ_TMPDIR");
    if (!dir) dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    remove_stale_scratch_files(dir);
    std::string p = std::string(dir) + "/layertap_fuzz_" + std::to_string(::getpid()) + ".safetensors";
    std::atexit([] { ::unlink(scratch_path().c_str()); });
    return p;
  }();
  return path;
}

void write_file(const std::string& path, const uint8_t* data, size_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) { std::perror(path.c_str()); std::abort(); }
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) { std::perror(path.c_str()); std::abort(); }
    done += size_t(n);
  }
  ::close(fd);
}

// The tensor names of a header the Checkpoint accepted (it has parsed the same bytes).
std::vector<std::string> tensor_names(const uint8_t* data) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(data[i]) << (8 * i);
  const auto h = nlohmann::json::parse(data + 8, data + 8 + n);
  std::vector<std::string> names;
  for (const auto& [name, v] : h.items())
    if (name != "__metadata__") names.push_back(name);
  return names;
}

// Open descriptors of `path` in this process (each /proc/self/fd entry links to its file).
int descriptors_of(const std::string& path) {
  std::error_code ec;
  const auto target = std::filesystem::weakly_canonical(path, ec);
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    std::error_code link_ec;
    if (std::filesystem::read_symlink(entry.path(), link_ec) == target) ++n;
  }
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = scratch_path();
  write_file(path, data, size);
  try {
    const layertap::Checkpoint ckpt({path});
    (void)ckpt.fingerprint();
    for (const std::string& name : tensor_names(data)) {
      if (!ckpt.has(name)) std::abort();  // accepted header, tensor lost
      const layertap::TensorInfo& t = ckpt.info(name);
      try {
        (void)ckpt.read_bytes(name);     // any dtype: the stored bytes
        (void)ckpt.read(name, t.shape);  // float dtypes only; others throw Error
        if (t.shape.size() == 2 && t.shape[0] > 0 && t.shape[1] > 0) {
          (void)ckpt.read_rows(name, t.shape, t.shape[0] - 1, 1);
          (void)ckpt.read_cols(name, t.shape, t.shape[1] - 1, 1);
        }
      } catch (const layertap::Error&) {
      }
    }
    (void)ckpt.has("");
  } catch (const layertap::Error&) {
    // A refused file: the expected outcome.
  }
  if (const int n = descriptors_of(path); n != 0) {
    std::fprintf(stderr, "fuzz_safetensors: %d descriptor(s) of the input file outlived the Checkpoint\n", n);
    std::abort();
  }
  return 0;
}
