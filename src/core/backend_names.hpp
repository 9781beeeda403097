// The backends' names: what Backend::name() and BackendChoice::name() return, what the manifest
// records as run.backend, what its readers accept (and nothing else), and what verify picks its
// error bound by. One home, so that no reader and no writer spells them on its own.
#pragma once
#include <string_view>

namespace layertap {

inline constexpr std::string_view kCpuBackend = "cpu";    // float32, exact against transformers
inline constexpr std::string_view kCudaBackend = "cuda";  // bf16, within the bf16 bound

}  // namespace layertap
