#include "bench/result_check.hpp"

#include "core/error.hpp"

namespace layertap {

namespace {

bool finite_bf16(std::uint16_t b) { return (b & 0x7f80u) != 0x7f80u; }  // exponent not all ones

std::string hex16(std::uint16_t v) {
  static const char digits[] = "0123456789abcdef";
  std::string s = "0x";
  for (int shift = 12; shift >= 0; shift -= 4) s += digits[(v >> shift) & 0xf];
  return s;
}

}  // namespace

void check_captured_states(const std::vector<std::vector<std::byte>>& first,
                           const std::vector<std::vector<std::byte>>& second, const std::vector<std::string>& points,
                           std::int64_t T, std::int64_t hidden, const std::string& what) {
  const std::size_t elems = std::size_t(T) * std::size_t(hidden);
  for (const auto* states : {&first, &second})
    LT_CHECK(states->size() == points.size(), "bench: ", what, ": a captured forward returned ", states->size(),
             " states, expected ", points.size());
  for (std::size_t p = 0; p < points.size(); ++p) {
    for (const auto* states : {&first, &second})
      LT_CHECK((*states)[p].size() == elems * sizeof(std::uint16_t), "bench: ", what, ": capture point ", points[p],
               " holds ", (*states)[p].size(), " bytes, expected (", T, ", ", hidden, ") bf16 = ",
               elems * sizeof(std::uint16_t));
    // bf16 has no padding bits: equal bits are equal values, and NaN payloads count as different.
    const auto* a = reinterpret_cast<const std::uint16_t*>(first[p].data());
    const auto* b = reinterpret_cast<const std::uint16_t*>(second[p].data());
    std::size_t bad = 0, first_bad = 0, differ = 0, first_differ = 0;
    for (std::size_t i = 0; i < elems; ++i) {
      if (!finite_bf16(a[i]) && bad++ == 0) first_bad = i;
      if (a[i] != b[i] && differ++ == 0) first_differ = i;
    }
    const auto at = [&](std::size_t i) {
      return cat("token ", i / std::size_t(hidden), ", element ", i % std::size_t(hidden));
    };
    LT_CHECK(bad == 0, "bench: ", what, ": capture point ", points[p], " holds ", bad, " NaN or Inf value(s) of ",
             elems, " (first at ", at(first_bad), ": ", hex16(a[first_bad]), ")");
    LT_CHECK(differ == 0, "bench: ", what, ": two captured forwards of the same batch differ at capture point ",
             points[p], " in ", differ, " of ", elems, " values (first at ", at(first_differ), ": ",
             hex16(a[first_differ]), " then ", hex16(b[first_differ]), ")");
  }
}

std::string check_forward(cuda::CudaBackend& backend, const PackedBatch& batch, const CapturePlan& plan,
                          const std::string& what) {
  const std::vector<std::vector<std::byte>> first = backend.forward(batch, plan, DType::BF16);
  const std::vector<std::vector<std::byte>> second = backend.forward(batch, plan, DType::BF16);
  std::vector<std::string> points;
  // Only the group's writer (TP rank 0) returns states.
  if (backend.shape().tp_rank == 0)
    for (const CapturePoint& p : plan.points) points.push_back(p.spec);
  check_captured_states(first, second, points, batch.num_tokens(), backend.shape().hidden, what);
  if (points.empty()) return "not the writer: no states returned (nothing to check)";
  return cat(points.size(), " points of (", batch.num_tokens(), ", ", backend.shape().hidden,
             ") bf16 finite, bitwise equal in two forwards");
}

}  // namespace layertap
