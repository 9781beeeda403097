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

ExpertKernel parse_expert_kernel(const std::string& name) {
  if (name == "auto") return ExpertKernel::Auto;
  if (name == "grouped") return ExpertKernel::Grouped;
  if (name == "expand") return ExpertKernel::Expand;
  LT_FAIL("unknown expert kernel '", name, "' (auto, grouped, expand)");
}

const char* expert_kernel_name(ExpertKernel k) {
  switch (k) {
    case ExpertKernel::Auto: return "auto";
    case ExpertKernel::Grouped: return "grouped";
    case ExpertKernel::Expand: return "expand";
  }
  return "?";
}

}  // namespace layertap::cuda
