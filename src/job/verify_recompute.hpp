// verify --samples: a stored sample recomputed from its tokens on the CPU backend at TP 1 and
// compared with its stored states at every capture point (core/state_compare.hpp).
#pragma once
#include <string>

#include "backend/cpu/cpu_backend.hpp"
#include "comm/tp_comm.hpp"
#include "io/manifest.hpp"
#include "job/verify_report.hpp"
#include "job/verify_sample.hpp"
#include "model/capture.hpp"
#include "model/hf_config.hpp"
#include "model/safetensors.hpp"

namespace layertap::job {

class SampleRecompute {
 public:
  // Loads the whole model in float32 and captures the manifest's points; `cfg` must have the
  // manifest's layer count and hidden size.
  SampleRecompute(const Checkpoint& ckpt, const ModelConfig& cfg, const io::Manifest& m);
  SampleRecompute(const SampleRecompute&) = delete;
  SampleRecompute& operator=(const SampleRecompute&) = delete;

  // Prints "ok <where>: ..." or reports the worst difference as a problem. Stored token ids outside
  // the vocabulary are a problem and are not run. Throws layertap::Error when the forward pass fails.
  void check(const StoredSample& s, VerifyReport& report);

 private:
  int64_t vocab_size_, hidden_;
  std::string storage_dtype_;  // the manifest's
  bool cuda_output_;           // written by the cuda backend: bf16 arithmetic, a looser bound
  SoloComm comm_;              // TP 1
  CpuBackend backend_;
  CapturePlan plan_;
};

}  // namespace layertap::job
