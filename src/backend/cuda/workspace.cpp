#include "backend/cuda/workspace.hpp"

#include "backend/cuda/gemm.hpp"
#include "kernels/attention.cuh"

namespace layertap::cuda {

namespace {
using bf16 = __nv_bfloat16;

// One layout for counting and placing: `w` is null when only counting.
void layout(Arena& dev, Arena& host, const LocalShape& s, std::int64_t Tm, std::int64_t P, Workspace* w) {
  const std::int64_t H = s.hidden, meta = Workspace::meta_ints(Tm);
  bf16* x = dev.take<bf16>(Tm * H);
  bf16* h = dev.take<bf16>(Tm * H);
  bf16* delta = dev.take<bf16>(Tm * H);
  bf16* qkv = dev.take<bf16>(Tm * s.qkv_dim());
  bf16* ctx = dev.take<bf16>(Tm * s.q_dim());
  bf16* gate_up = dev.take<bf16>(Tm * 2 * s.inter);
  bf16* act = dev.take<bf16>(Tm * s.inter);
  bf16* snapshots = dev.take<bf16>(P * Tm * H);
  std::int32_t* dmeta = dev.take<std::int32_t>(meta);
  std::int32_t* bad = dev.take<std::int32_t>(1);
  float* inv_freq = dev.take<float>(s.head_dim / 2);
  std::byte* gemm = dev.take<std::byte>(std::int64_t(Gemm::kWorkspaceBytes));
  std::int32_t* hmeta = host.take<std::int32_t>(meta);
  std::int32_t* hbad = host.take<std::int32_t>(1);
  std::uint16_t* hstates = host.take<std::uint16_t>(P * Tm * H);
  if (w == nullptr) return;
  w->x = x;
  w->h = h;
  w->delta = delta;
  w->qkv = qkv;
  w->ctx = ctx;
  w->gate_up = gate_up;
  w->act = act;
  w->snapshots = snapshots;
  w->meta = dmeta;
  w->bad_token = bad;
  w->inv_freq = inv_freq;
  w->gemm = gemm;
  w->host_meta = hmeta;
  w->host_bad_token = hbad;
  w->host_states = hstates;
}
}  // namespace

std::int64_t Workspace::meta_ints(std::int64_t max_tokens) {
  return 2 * max_tokens + 2 * kernels::max_flash_tiles(max_tokens);
}

std::size_t Workspace::device_bytes(const LocalShape& s, std::int64_t Tm, std::int64_t P) {
  Arena dev, host;
  layout(dev, host, s, Tm, P, nullptr);
  return dev.used();
}

std::size_t Workspace::pinned_bytes(const LocalShape& s, std::int64_t Tm, std::int64_t P) {
  Arena dev, host;
  layout(dev, host, s, Tm, P, nullptr);
  return host.used();
}

Workspace::Workspace(const LocalShape& s, std::int64_t Tm, std::int64_t P)
    : device_(device_bytes(s, Tm, P)), pinned_(pinned_bytes(s, Tm, P)) {
  Arena dev(device_.data(), device_.bytes()), host(pinned_.data(), pinned_.bytes());
  layout(dev, host, s, Tm, P, this);
}

}  // namespace layertap::cuda
