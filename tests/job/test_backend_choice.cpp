// Choosing the backend (job/backend_choice), in process on the llama fixture: --backend cpu gives
// the CPU backend, which runs here; auto is cpu where no GPU is seen (a build without CUDA, or the
// simulated GPU with LAYERTAP_SIM_DEVICES=0) and cuda where one is; --backend cuda without CUDA or
// without a GPU is refused before any weight is read, unless it is only planned (--dry-run
// --gpu-memory). The host plan, the --dry-run plan and the host-memory check agree with each other.
// choose_backend and the host-memory check are collective: MPI (a world of one) is initialised in
// main.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "comm/mpi_env.hpp"
#include "comm/mpi_groups.hpp"
#include "comm/world_layout.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "job/backend_choice.hpp"
#include "model/hf_config.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"
#ifdef LAYERTAP_HAVE_CUDA
#include "job/cuda_backend_choice.hpp"
#endif

namespace layertap::job {
namespace {

const ModelConfig& llama() {
  static const ModelConfig cfg = load_model_config(LAYERTAP_FIXTURES "/models/llama/config.json");
  return cfg;
}

// Whether this build has the CUDA backend and this process sees a GPU (real or simulated).
bool gpu_here() {
#ifdef LAYERTAP_HAVE_CUDA
  return cuda_gpu_here();
#else
  return false;
#endif
}

bool cuda_build() {
#ifdef LAYERTAP_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

RankLoad small_load() {
  RankLoad load;
  load.max_batch_tokens = 512;
  load.capture_points = 4;
  load.dataset_bytes = 1 << 20;
  return load;
}

TEST(ChooseBackend, CpuIsTheCpuBackendAndRunsHere) {
  for (const int tp : {1, 2}) {
    const TpShard shard{0, tp, MoeSplit::Experts};
    for (const bool planning : {false, true}) {
      const auto choice = choose_backend(BackendRequest::Cpu, llama(), shard, planning);
      ASSERT_NE(choice, nullptr);
      EXPECT_STREQ(choice->name(), "cpu");
      EXPECT_TRUE(choice->runs_here());
      EXPECT_EQ(choice->shard().size, tp);
      EXPECT_EQ(choice->shard().rank, 0);
    }
  }
}

TEST(ChooseBackend, AutoIsCpuWithoutAGpuAndCudaWithOne) {
  const auto choice = choose_backend(BackendRequest::Auto, llama(), TpShard{}, false);
  ASSERT_NE(choice, nullptr);
  // The CUDA backend runs the llama fixture: where every rank sees a GPU in a CUDA build, auto is cuda.
  EXPECT_STREQ(choice->name(), gpu_here() ? "cuda" : "cpu")
      << (cuda_build() ? "CUDA build" : "build without CUDA") << ", GPU " << (gpu_here() ? "seen" : "not seen");
  EXPECT_TRUE(choice->runs_here());
}

TEST(ChooseBackend, CudaWithoutAGpuIsRefusedUnlessOnlyPlanned) {
  if (gpu_here()) GTEST_SKIP() << "a GPU is seen (run with LAYERTAP_SIM_DEVICES=0 on the simulated GPU)";
  const std::string err = error_of([] { choose_backend(BackendRequest::Cuda, llama(), TpShard{}, false); });
  EXPECT_NE(err.find("--backend cuda: "), std::string::npos) << "error: '" << err << "'";
  if (cuda_build()) {
    EXPECT_NE(err.find("sees no GPU"), std::string::npos) << err;
    EXPECT_NE(err.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << err;  // what to check
    // --dry-run --gpu-memory plans a CUDA job on a machine without a GPU; it does not run here.
    const auto planned = choose_backend(BackendRequest::Cuda, llama(), TpShard{}, /*planning=*/true);
    EXPECT_STREQ(planned->name(), "cuda");
    EXPECT_FALSE(planned->runs_here());
  } else {
    EXPECT_NE(err.find("this build has no CUDA"), std::string::npos) << err;
    // Planning does not make a build without CUDA plan a CUDA job.
    EXPECT_NE(error_of([] { choose_backend(BackendRequest::Cuda, llama(), TpShard{}, true); })
                  .find("this build has no CUDA"),
              std::string::npos);
  }
}

TEST(BackendChoice, TheCpuHostPlanHoldsTheWeightsAndAgreesWithTheDryRunPlan) {
  const auto tp1 = choose_backend(BackendRequest::Cpu, llama(), TpShard{0, 1, MoeSplit::Experts}, false);
  const auto tp2 = choose_backend(BackendRequest::Cpu, llama(), TpShard{0, 2, MoeSplit::Experts}, false);
  const RankLoad load = small_load();
  const HostPlan plan = tp1->host_plan(load);
  ASSERT_FALSE(plan.parts.empty());
  int64_t sum = 0, weights = -1;
  for (const auto& [what, bytes] : plan.parts) {
    EXPECT_FALSE(what.empty());
    EXPECT_GE(bytes, 0) << what;
    sum += bytes;
    if (what.find("weights") != std::string::npos) weights = bytes;
    EXPECT_NE(plan.describe().find(what + " " + human_bytes(bytes)), std::string::npos) << plan.describe();
  }
  EXPECT_EQ(plan.total(), sum);
  EXPECT_GT(weights, 0) << "the CPU backend keeps its float32 weight slices on the host: " << plan.describe();
  // At TP 2 each rank holds a slice of them.
  EXPECT_LT(tp2->host_plan(load).total(), plan.total());
  // A larger load never needs less.
  RankLoad more = load;
  more.max_batch_tokens *= 4;
  more.dataset_bytes *= 4;
  EXPECT_GT(tp1->host_plan(more).total(), plan.total());

  // --dry-run's plan of a CPU rank: its host plan, and it fits.
  const Checkpoint ckpt(checkpoint_files(LAYERTAP_FIXTURES "/models/llama"));
  MpiGroups groups(make_world_layout(0, 1, 1));
  const RankPlan dry = tp1->describe_plan(ckpt, groups, load);
  EXPECT_TRUE(dry.fits);
  EXPECT_FALSE(dry.text.empty());
  EXPECT_NE(dry.text.find(plan.describe()), std::string::npos) << dry.text;
  EXPECT_NE(dry.text.find(human_bytes(plan.total())), std::string::npos) << dry.text;
}

TEST(BackendChoice, TheHostMemoryCheckPassesASmallLoadAndNamesTheNumbersOfAHugeOne) {
  const auto cpu = choose_backend(BackendRequest::Cpu, llama(), TpShard{}, false);
  EXPECT_EQ(host_memory_problem(*cpu, small_load()), "");
  RankLoad huge = small_load();
  huge.dataset_bytes = int64_t(1) << 56;  // 64 PiB of dataset share
  const std::string problem = host_memory_problem(*cpu, huge);
  for (const std::string& part : {std::string("not enough host memory"), std::string("backend cpu"),
                                 std::string("--max-batch-tokens 512"), cpu->host_plan(huge).describe()})
    EXPECT_NE(problem.find(part), std::string::npos) << "missing '" << part << "' in '" << problem << "'";
}

}  // namespace
}  // namespace layertap::job

int main(int argc, char** argv) {
  const layertap::MpiEnv mpi(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
