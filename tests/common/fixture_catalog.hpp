// The golden fixtures (tests/fixtures/models, written by tools/make_fixtures.py), listed once:
// every C++ test that walks them takes its list from here, so a new family's fixture is one line.
#pragma once
#include <string>
#include <vector>

#include "model/rank_layout.hpp"

namespace layertap::test {

inline const std::vector<std::string>& dense_fixtures() {
  static const std::vector<std::string> names{"llama", "llama3_rope", "mistral", "qwen2", "qwen3", "llama_tp", "gemma3"};
  return names;
}

inline const std::vector<std::string>& moe_fixtures() {
  static const std::vector<std::string> names{"deepseek_v3",     "kimi_k2",   "deepseek_v3_noqlora",
                                              "kimi_k25_int4",   "deepseek_v3_fp8", "qwen3_moe",
                                              "mixtral",         "mixtral_swa", "glm4_moe",
                                              "gpt_oss",         "llama4"};
  return names;
}

// Multimodal wrappers around a text model that a fixture above already has (same weights, same
// states): what differs is the config and the tensor names, which the CPU tests and the load plan
// read; the CUDA backend's forward is the text model's, run on that fixture.
inline const std::vector<std::string>& wrapper_fixtures() {
  static const std::vector<std::string> names{"gemma3_wrapper"};
  return names;
}

inline std::vector<std::string> all_fixtures() {
  std::vector<std::string> all = dense_fixtures();
  all.insert(all.end(), moe_fixtures().begin(), moe_fixtures().end());
  all.insert(all.end(), wrapper_fixtures().begin(), wrapper_fixtures().end());
  return all;
}

// Whether the rank layout must refuse fixture `name` at TP `tp` with `split` (tests/fixtures/
// README.md): every MoE fixture divides at TP 1, 2 and 4, except that deepseek_v3_fp8's per-rank
// q_b/kv_b rows at TP 4 (24) cut its FP8 row blocks of 16, and kimi_k25_int4's expert down_proj
// slices at TP 4 under the intermediate split (16 columns) cut its INT4 groups of 32. The dense
// fixtures divide where their heads and intermediate size do (llama_tp at 1, 2 and 4).
inline bool fixture_refuses(const std::string& name, int heads, int64_t intermediate, int tp, MoeSplit split) {
  if (name == "deepseek_v3_fp8") return tp == 4;
  if (name == "kimi_k25_int4") return tp == 4 && split == MoeSplit::Intermediate;
  return heads % tp != 0 || intermediate % tp != 0;
}

}  // namespace layertap::test
