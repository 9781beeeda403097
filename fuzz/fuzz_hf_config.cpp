// libFuzzer target: config.json parsing and validation (model/hf_config.cpp, model/quant_config.cpp).
// A layertap::Error is the expected outcome for a bad config; any other exception (nlohmann's
// json::exception escaping, std::out_of_range, ...), a crash or a sanitizer report is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.hpp"
#include "model/hf_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const layertap::ModelConfig c = layertap::parse_model_config(text, "fuzz/config.json");
    // The per-layer vectors the model indexes by layer must have one entry per layer.
    if (c.sliding_window.size() != std::size_t(c.num_layers)) std::abort();
    if (c.moe && c.moe_layers.size() != std::size_t(c.num_layers)) std::abort();
    for (int64_t i = 0; i < c.num_layers; ++i) (void)c.is_moe_layer(i);
    (void)c.q_dim();
    (void)c.kv_dim();
  } catch (const layertap::Error&) {
    // A refused config: the expected outcome.
  }
  return 0;
}
