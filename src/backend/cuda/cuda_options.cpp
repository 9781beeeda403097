#include "backend/cuda/cuda_options.hpp"

#include "core/error.hpp"

namespace layertap::cuda {

AttentionKernel parse_attention_kernel(const std::string& name) {
  if (name == "auto") return AttentionKernel::Auto;
  if (name == "reference") return AttentionKernel::Reference;
  if (name == "flash") return AttentionKernel::Flash;
  LT_FAIL("unknown attention kernel '", name, "' (auto, reference, flash)");
}

const char* attention_kernel_name(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::Auto: return "auto";
    case AttentionKernel::Reference: return "reference";
    case AttentionKernel::Flash: return "flash";
  }
  return "?";
}

}  // namespace layertap::cuda
