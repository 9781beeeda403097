// Tensor parallelism against the Hugging Face reference, under mpirun on the CPU backend:
//   mpirun -np N test_tp_golden --tp T --moe-split experts|intermediate FIXTURES_DIR
// Every data-parallel group runs every golden model whose layout T allows (all golden samples
// packed in one batch) and TP rank 0 compares every capture point of every sample. Then the same
// samples run in chunks (chunked prefill, planned and joined as the job does) at several batch
// budgets: boundaries inside samples, at a sample's last token, and one-token chunks; each run is
// held to the same bound against the reference. Layouts that T
// cannot split must be refused by every rank before any weight is read, and only those. With
// --moe-split intermediate only the MoE models run (the dense ones do not depend on it). Each rank
// counts its errors; the counts are summed over the world and the exit code reflects the global
// result.
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "job/chunk_joiner.hpp"
#include "job/dataset_plan.hpp"
#include "comm/mpi_groups.hpp"
#include "core/error.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"
#include "fixture_catalog.hpp"
#include "fixture_reference.hpp"

namespace fs = std::filesystem;
using namespace layertap;

namespace {

constexpr double kMaxRelError = 1e-5;

// Batch budgets for the chunked runs over the golden samples (19, 1, 61, 7 and 33 tokens): 16 cuts
// samples and packs chunks with whole samples, 18 and 60 leave one token for a last chunk, 1 runs
// every token alone.
constexpr int64_t kChunkBudgets[] = {16, 18, 60, 1};

bool must_refuse(const std::string& name, const ModelConfig& cfg, int tp, MoeSplit split) {
  return test::fixture_refuses(name, int(cfg.num_heads), cfg.intermediate_size, tp, split);
}

// Returns the number of (sample, point) comparisons above tolerance on this rank.
int check_model(const fs::path& dir, const WorldLayout& world, MoeSplit split, MpiGroups& groups, double& worst) {
  const ModelConfig cfg = load_model_config((dir / "config.json").string());
  const TpShard shard{world.tp_rank, world.tp, split};
  const bool refuse = must_refuse(dir.filename().string(), cfg, world.tp, split);
  try {
    check_tp_divisibility(cfg, shard);
  } catch (const Error& e) {
    if (world.world_rank == 0) std::printf("[tp-golden] %-12s refused at tp %d: %s\n", dir.filename().c_str(), world.tp, e.what());
    return refuse ? 0 : 1;  // refusing a layout that could be split is an error
  }
  if (refuse) {
    std::printf("[tp-golden] rank %d: %s at tp %d was accepted but must be refused\n", world.world_rank,
                dir.filename().c_str(), world.tp);
    return 1;
  }
  const Checkpoint ckpt(checkpoint_files(dir.string()));
  CpuBackend backend(cfg, load_weights(ckpt, cfg, shard), groups.tp());
  const int64_t L = cfg.num_layers, H = cfg.hidden_size;
  const test::FixtureReference ref = test::load_fixture_reference((dir / "reference.safetensors").string(), L, H);
  PackedBatch batch;
  batch.offsets.push_back(0);
  for (const auto& tokens : ref.tokens) {
    batch.tokens.insert(batch.tokens.end(), tokens.begin(), tokens.end());
    batch.offsets.push_back(batch.num_tokens());
  }
  std::string request;
  for (int64_t k = 0; k <= L; ++k) request += cat(k, ",");
  const CapturePlan plan = resolve_capture(request + "final", L);
  // Compares states [P][T, H] of every sample, packed in order, with the reference.
  const auto compare = [&](const std::vector<std::vector<std::byte>>& states, const std::string& how) {
    if (!world.is_writer()) return states.empty() ? 0 : 1;  // only TP rank 0 captures
    int errors = 0;
    int64_t row = 0;
    for (std::size_t s = 0; s < ref.tokens.size(); ++s) {
      const int64_t T = int64_t(ref.tokens[s].size());
      for (std::size_t p = 0; p < plan.points.size(); ++p) {
        const float* got = reinterpret_cast<const float*>(states[p].data()) + row * H;
        const double err = test::relative_error(got, ref.state(s, plan.points[p].id, H), std::size_t(T * H));
        worst = std::max(worst, err);
        if (!(err <= kMaxRelError)) {
          ++errors;
          std::printf("[tp-golden] rank %d: %s %s sample %zu point %s: relative error %.3g\n", world.world_rank,
                      dir.filename().c_str(), how.c_str(), s, plan.points[p].spec.c_str(), err);
        }
      }
      row += T;
    }
    return errors;
  };
  int errors = compare(backend.forward(batch, plan, DType::F32), "whole");

  std::vector<int64_t> lengths;
  for (const auto& tokens : ref.tokens) lengths.push_back(int64_t(tokens.size()));
  for (const int64_t budget : kChunkBudgets) {
    job::ChunkJoiner joiner(H * int64_t(sizeof(float)));
    std::vector<std::vector<std::byte>> joined(world.is_writer() ? plan.points.size() : 0);
    for (const job::Batch& b : job::plan_batches(lengths, 0, budget)) {
      const PackedBatch pb = job::pack_batch(b, lengths, [&](std::size_t i) -> const auto& { return ref.tokens[i]; });
      const auto whole = joiner.join(b, lengths, backend.forward(pb, plan, DType::F32));
      for (std::size_t p = 0; p < whole.size(); ++p) joined[p].insert(joined[p].end(), whole[p].begin(), whole[p].end());
    }
    errors += compare(joined, cat("in chunks of up to ", budget, " tokens"));
  }
  return errors;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int errors = 0;
  if (argc != 6 || std::strcmp(argv[1], "--tp") != 0 || std::strcmp(argv[3], "--moe-split") != 0) {
    if (rank == 0) std::fprintf(stderr, "usage: test_tp_golden --tp T --moe-split experts|intermediate FIXTURES_DIR\n");
    MPI_Finalize();
    return 2;
  }
  try {
    const WorldLayout world = make_world_layout(rank, size, std::atoi(argv[2]));
    const MoeSplit split = parse_moe_split(argv[4]);
    MpiGroups groups(world);
    std::vector<std::string> models = test::moe_fixtures();
    if (split == MoeSplit::Experts) models = test::all_fixtures();
    for (const std::string& name : models) {
      double worst = 0;
      errors += check_model(fs::path(argv[5]) / "models" / name, world, split, groups, worst);
      const double worst_all = max_over_ranks(worst);
      if (rank == 0 && worst_all > 0)
        std::printf("[tp-golden] %-19s np %d tp %d moe-split %s: worst relative error %.3g\n", name.c_str(), size, world.tp,
                    argv[4], worst_all);
    }
  } catch (const std::exception& e) {
    std::printf("[tp-golden] rank %d: %s\n", rank, e.what());
    ++errors;
  }
  int total = 0;
  MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) std::printf("[tp-golden] np %d: %d errors over all ranks\n", size, total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
