// What one kernel launch moves and computes, stated by its launcher from its arguments, next to
// its contract. nvcc builds ignore it; the simulated GPU records it with every launch, and the
// cost report (src/bench/cost_report.hpp) turns those records into a projected time per card.
// Figures are for the whole grid; a byte read twice from DRAM by two blocks counts once when
// the second read would hit L2 (a tile of a weight every block reads), twice otherwise.
#pragma once

namespace layertap::kernels {

struct Work {
  double read = 0;     // bytes read from device memory
  double written = 0;  // bytes written to device memory
  double flops = 0;    // tensor-core floating-point operations (2 per multiply-add)
  double ops = 0;      // other lane instructions (CUDA cores), every thread of the grid together

  bool stated() const { return read > 0 || written > 0 || flops > 0 || ops > 0; }
};

}  // namespace layertap::kernels
