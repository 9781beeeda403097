// libFuzzer target: config.json parsing and validation (model/hf_config.cpp, model/quant_config.cpp),
// then what is sized from a config before any weight is read: the tensor-parallel layout checks of
// both MoE splits (which loop over layers and experts), the host-memory estimate, and the
// quantization patterns matched against module names (RE2: linear time whatever the pattern).
// A layertap::Error is the expected outcome for a bad config; any other exception (nlohmann's
// json::exception escaping, std::out_of_range, ...), a crash or a sanitizer report is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.hpp"
#include "model/hf_config.hpp"
#include "model/weights.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const layertap::ModelConfig c = layertap::parse_model_config(text, "fuzz/config.json");
    // The model indexes `layers` by layer: one entry per layer.
    if (c.layers.size() != std::size_t(c.num_layers)) std::abort();
    for (int64_t i = 0; i < c.num_layers; ++i) (void)c.is_moe_layer(i);
    (void)c.q_dim();
    (void)c.kv_dim();
    for (const int tp : {1, 2, 8})
      for (const layertap::MoeSplit split : {layertap::MoeSplit::Experts, layertap::MoeSplit::Intermediate}) {
        try {
          layertap::check_tp_divisibility(c, {0, tp, split});
        } catch (const layertap::Error&) {
          continue;  // a layout that does not divide this config
        }
        if (layertap::host_weight_bytes(c, {tp - 1, tp, split}) < 0) std::abort();
      }
    for (const char* m : {"model.layers.0.mlp.experts.0.gate_proj", "model.layers.1.self_attn.q_a_proj",
                          "language_model.model.layers.3.mlp.experts.7.down_proj", "lm_head"})
      (void)c.quant.int4_packed(m);
  } catch (const layertap::Error&) {
    // A refused config: the expected outcome.
  }
  return 0;
}
