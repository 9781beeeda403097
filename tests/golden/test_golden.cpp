// Golden tests: the CPU backend against Hugging Face transformers' float32 hidden states
// (tests/fixtures, made by tools/make_fixtures.py). Every capture point of every sample is
// compared, with all samples packed in one batch and with one sample per batch.
#include <gtest/gtest.h>

#include <filesystem>

#include "backend/cpu/cpu_backend.hpp"
#include "comm/tp_comm.hpp"
#include "core/error.hpp"
#include "model/capture.hpp"
#include "model/hf_config.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"
#include "fixture_catalog.hpp"
#include "fixture_reference.hpp"

namespace layertap {
namespace {

namespace fs = std::filesystem;
constexpr double kMaxRelError = 1e-5;  // relative Frobenius error per (sample, point)

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, EveryPointOfEverySampleMatchesTransformers) {
  const fs::path dir = fs::path(LAYERTAP_FIXTURES) / "models" / GetParam();
  const ModelConfig cfg = load_model_config((dir / "config.json").string());
  const Checkpoint ckpt(checkpoint_files(dir.string()));
  SoloComm comm;
  CpuBackend backend(cfg, load_weights(ckpt, cfg, {}), comm);
  const int64_t L = cfg.num_layers, H = cfg.hidden_size;
  const test::FixtureReference ref = test::load_fixture_reference((dir / "reference.safetensors").string(), L, H);

  // All points 0..L, then final (id L+1): point p has id p.
  std::string request;
  for (int64_t k = 0; k <= L; ++k) request += cat(k, ",");
  const CapturePlan plan = resolve_capture(request + "final", L);

  double worst = 0;
  auto check = [&](const std::vector<std::size_t>& samples, const char* mode) {
    PackedBatch batch;
    batch.offsets.push_back(0);
    for (std::size_t s : samples) {
      batch.tokens.insert(batch.tokens.end(), ref.tokens[s].begin(), ref.tokens[s].end());
      batch.offsets.push_back(batch.num_tokens());
    }
    const auto states = backend.forward(batch, plan, DType::F32);
    ASSERT_EQ(states.size(), plan.points.size());
    for (std::size_t p = 0; p < plan.points.size(); ++p) {
      const auto* got = reinterpret_cast<const float*>(states[p].data());
      for (std::size_t i = 0; i < samples.size(); ++i) {
        const std::size_t s = samples[i];
        const int64_t T = int64_t(ref.tokens[s].size());
        const double err = test::relative_error(got + batch.offsets[i] * H, ref.state(s, plan.points[p].id, H),
                                                std::size_t(T * H));
        worst = std::max(worst, err);
        EXPECT_LE(err, kMaxRelError) << GetParam() << " " << mode << ": sample " << s << ", point "
                                     << plan.points[p].spec << " (" << plan.meaning(p) << ")";
      }
    }
  };
  std::vector<std::size_t> all;
  for (std::size_t s = 0; s < ref.tokens.size(); ++s) {
    all.push_back(s);
    check({s}, "one sample per batch");
  }
  check(all, "all samples packed");
  std::printf("[golden] %-12s worst relative error %.3g over %zu samples x %zu points\n", GetParam().c_str(),
              worst, ref.tokens.size(), plan.points.size());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Golden, ::testing::ValuesIn(test::all_fixtures()),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace layertap
