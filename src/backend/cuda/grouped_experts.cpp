#include "backend/cuda/grouped_experts.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/text.hpp"
#include "kernels/cuda_check.hpp"

namespace layertap::cuda {
namespace {

using Part = kernels::GroupedWeightPart;

// One projection of every local expert of a layer: its parts (expert-major) and how they are stored.
struct Projection {
  kernels::GroupedWeights w;
  std::vector<Part> parts;
  std::string problem;  // "" when the kernel reads it
};

// The packed pieces of local expert e's gate/up (first: DeviceWeights places them first, gate rows
// then up rows) or down (second), in placement order.
std::vector<const PackedPiece*> pieces_of(const DeviceLayer& l, std::int64_t e, bool down) {
  std::vector<const PackedPiece*> gate_up, rest;
  std::int64_t rows = 0;
  for (const PackedPiece& pc : l.packed) {
    if (pc.expert != e) continue;
    if (rows < l.experts.gate_up[std::size_t(e)].out) {
      gate_up.push_back(&pc);
      rows += pc.rows;
    } else {
      rest.push_back(&pc);
    }
  }
  return down ? rest : gate_up;
}

// The parts of every local expert's gate/up (down == false) or down: bf16 ones whole, packed ones
// as the pieces that fill their rows.
Projection projection(const DeviceLayer& l, bool down) {
  const std::vector<DeviceLinear>& linears = down ? l.experts.down : l.experts.gate_up;
  const char* what = down ? "down projections" : "gate/up projections";
  Projection p;
  const auto fail = [&](const std::string& why) {
    p.problem = cat("the routed experts' ", what, " ", why);
    return p;
  };
  for (std::size_t e = 0; e < linears.size(); ++e) {
    const DeviceLinear& lin = linears[e];
    const std::vector<const PackedPiece*> pieces =
        lin.packed ? pieces_of(l, std::int64_t(e), down) : std::vector<const PackedPiece*>{};
    kernels::GroupedWeights w;
    if (!lin.packed) {
      w.format = kernels::GroupedFormat::Bf16;
      w.parts_per_expert = 1;
      w.part_rows = lin.out;
      p.parts.push_back(Part{lin.w, nullptr, lin.b});
    } else {
      if (pieces.empty()) return fail("are packed but no stored piece was found");
      const PackedPiece& f = *pieces.front();
      w.format = f.storage.kind == LinearStorage::Kind::Fp8Block ? kernels::GroupedFormat::Fp8Block
                                                                  : kernels::GroupedFormat::Int4Group;
      w.parts_per_expert = std::int64_t(pieces.size());
      w.part_rows = f.rows;
      w.block_rows = f.block_rows;
      w.block_cols = f.block_cols;
      w.row_phase = f.row_phase;
      w.col_phase = f.col_phase;
      w.group = f.group;
      w.scale_type = f.storage.scale;
      std::int64_t bias_row = 0;
      for (const PackedPiece* pc : pieces) {
        if (pc->rows != f.rows || pc->cols != lin.in || pc->storage.kind != f.storage.kind ||
            pc->storage.scale != f.storage.scale || pc->row_phase != f.row_phase || pc->col_phase != f.col_phase)
          return fail("are stored in pieces of different shapes, formats or phases");
        // The piece's rows of the expert's bias (its pieces fill the rows in order).
        p.parts.push_back(Part{pc->data, pc->scales, lin.b != nullptr ? lin.b + bias_row : nullptr});
        bias_row += pc->rows;
      }
      if (w.part_rows * w.parts_per_expert != lin.out) return fail("have pieces that do not cover their rows");
      if (w.format == kernels::GroupedFormat::Int4Group && w.group % 32 != 0)
        return fail(cat("are INT4 in groups of ", w.group, " (the grouped GEMM takes multiples of 32)"));
      if (w.format == kernels::GroupedFormat::Fp8Block && (w.block_cols % 8 != 0 || w.col_phase % 8 != 0))
        return fail(cat("are FP8 in blocks of ", w.block_cols, " columns at phase ", w.col_phase,
                        " (the grouped GEMM takes multiples of 8)"));
    }
    // The grouped GEMM's K rule (kernels/grouped_gemm.cuh): INT4 rows of whole words, FP8 rows read
    // 4 bytes at a time, bf16 rows 2 values at a time.
    const std::int64_t k_multiple = w.format == kernels::GroupedFormat::Int4Group ? 8
                                    : w.format == kernels::GroupedFormat::Fp8Block ? 4
                                                                                   : 2;
    if (lin.in % k_multiple != 0)
      return fail(cat("have ", lin.in, " input features (the grouped GEMM takes multiples of ", k_multiple,
                      " in this format)"));
    if (lin.biased != linears.front().biased) return fail("differ in having biases");
    if (e == 0) {
      p.w = w;
    } else if (w.format != p.w.format || w.parts_per_expert != p.w.parts_per_expert || w.part_rows != p.w.part_rows ||
               w.row_phase != p.w.row_phase || w.col_phase != p.w.col_phase || w.group != p.w.group ||
               w.scale_type != p.w.scale_type) {
      return fail("are not all stored alike");
    }
  }
  return p;
}

}  // namespace

std::string grouped_experts_problem(const DeviceWeights& w, const LocalShape& s) {
  for (std::int64_t i = 0; i < s.layers; ++i) {
    const DeviceLayer& l = w.layers[std::size_t(i)];
    if (!l.moe) continue;
    for (const bool down : {false, true}) {
      const Projection p = projection(l, down);
      if (!p.problem.empty()) return cat("layer ", i, ": ", p.problem);
    }
  }
  return "";
}

GroupedExperts::GroupedExperts(const DeviceWeights& w, const LocalShape& s, Part* tables) {
  const std::string problem = grouped_experts_problem(w, s);
  LT_CHECK(problem.empty(), "cuda backend: the grouped expert GEMM cannot read this model's experts: ", problem);
  layers_.resize(std::size_t(s.layers));
  // Layer m's parts at tables + m n kGroupedPartsPerExpert: gate/up's, then down's.
  std::vector<Part> all(std::size_t(s.moe_layers_before(s.layers) * s.local_experts * kGroupedPartsPerExpert));
  std::vector<std::pair<std::size_t, std::size_t>> at(std::size_t(s.layers));  // first part of gate_up, of down
  for (std::int64_t i = 0; i < s.layers; ++i) {
    const DeviceLayer& l = w.layers[std::size_t(i)];
    if (!l.moe) continue;
    const Projection gu = projection(l, false), down = projection(l, true);
    LT_CHECK(std::int64_t(gu.parts.size() + down.parts.size()) <= s.local_experts * kGroupedPartsPerExpert,
             "cuda backend: layer ", i, "'s experts are stored in more than ", kGroupedPartsPerExpert, " parts each");
    const std::size_t first = std::size_t(s.moe_layers_before(i) * s.local_experts * kGroupedPartsPerExpert);
    at[std::size_t(i)] = {first, first + gu.parts.size()};
    std::copy(gu.parts.begin(), gu.parts.end(), all.begin() + long(first));
    std::copy(down.parts.begin(), down.parts.end(), all.begin() + long(first + gu.parts.size()));
    layers_[std::size_t(i)] = GroupedLayer{gu.w, down.w};
  }
  if (all.empty()) return;
  LT_CUDA_CHECK(cudaMemcpy(tables, all.data(), all.size() * sizeof(Part), cudaMemcpyHostToDevice));
  const Part* parts = tables;
  for (std::int64_t i = 0; i < s.layers; ++i) {
    if (!w.layers[std::size_t(i)].moe) continue;
    layers_[std::size_t(i)].gate_up.parts = parts + at[std::size_t(i)].first;
    layers_[std::size_t(i)].down.parts = parts + at[std::size_t(i)].second;
  }
}

}  // namespace layertap::cuda
