// Kernel launches on the simulated GPU (the LAYERTAP_CUDA_SIM side of kernels/launch.cuh).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/work.hpp"

namespace layertap::sim {

struct KernelLaunch {
  std::string_view name;              // the kernel, as its template argument prints
  dim3 grid, block;
  std::size_t shared_bytes = 0;
  cudaStream_t stream = nullptr;
  kernels::Work work;                 // as its launcher states it (recorded, never checked against the run)
  std::vector<const void*> pointers;  // the raw pointer arguments: checked against the device
  std::function<void()> run_thread;   // one CUDA thread's body (reads threadIdx & co)
};

// Checks the configuration and the pointers, then queues the grid on the stream. Errors are
// reported on stderr naming the kernel and returned (and kept for cudaGetLastError).
cudaError_t launch_kernel(KernelLaunch&& launch);

namespace detail {
template <class F>
struct Params;
template <class... P>
struct Params<void (*)(P...)> {
  using tuple = std::tuple<std::decay_t<P>...>;
};

template <class T>
void collect_pointer(std::vector<const void*>& out, const T& v) {
  if constexpr (std::is_pointer_v<T>) out.push_back(static_cast<const void*>(v));
}

// "void layertap::sim::detail::name_of() [with auto K = ns::kernel<64, 64>; std::string_view = ...]"
// -> "ns::kernel<64, 64>"
template <auto K>
std::string_view name_of() {
  std::string_view f = __PRETTY_FUNCTION__;
  const auto at = f.find("K = ");
  if (at == std::string_view::npos) return f;
  f.remove_prefix(at + 4);
  // Up to the end of the argument: "]", or "; " before another name g++ lists, outside <...>.
  int depth = 0;
  for (std::size_t i = 0; i < f.size(); ++i) {
    if (f[i] == '<') ++depth;
    if (f[i] == '>') --depth;
    if (depth == 0 && (f[i] == ']' || f[i] == ';')) return f.substr(0, i);
  }
  return f;
}
}  // namespace detail

template <auto Kernel, class... Args>
void launch(dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t stream, const kernels::Work& work,
            Args&&... args) {
  using Tuple = typename detail::Params<decltype(Kernel)>::tuple;
  auto params = std::make_shared<const Tuple>(std::forward<Args>(args)...);  // the launch's copy
  KernelLaunch l{detail::name_of<Kernel>(), grid, block, shared_bytes, stream, work, {}, {}};
  std::apply([&](const auto&... p) { (detail::collect_pointer(l.pointers, p), ...); }, *params);
  // Each CUDA thread gets its own copy of the parameters, as kernel parameters are per thread.
  l.run_thread = [params] { std::apply(Kernel, Tuple(*params)); };
  (void)launch_kernel(std::move(l));
}

}  // namespace layertap::sim
