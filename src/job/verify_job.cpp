#include "job/verify_job.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <tuple>
#include <vector>

#include "backend/cpu/ops.hpp"
#include "core/digest.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "io/manifest.hpp"
#include "io/output_check.hpp"
#include "io/output_lock.hpp"
#include "io/shard_reader.hpp"
#include "job/verify_lm_head.hpp"
#include "job/verify_recompute.hpp"
#include "job/verify_report.hpp"
#include "job/verify_sample.hpp"
#include "job/verify_token_stats.hpp"
#include "model/hf_config.hpp"
#include "model/safetensors.hpp"

namespace layertap::job {
namespace {

namespace fs = std::filesystem;

struct SampleRef {
  std::size_t shard;  // position in the manifest's shard list
  int64_t row;        // sample position inside the shard
};

// The model verify recomputes and scores with.
struct Model {
  ModelConfig cfg;
  std::unique_ptr<Checkpoint> ckpt;
};

class Verifier {
 public:
  Verifier(const VerifyOptions& o, std::ostream& out) : o_(o), report_(out) {}

  int run() {
    // Whatever is wrong with the output, verify ends with its summary line.
    try {
      // Shared: a job writing the output holds it exclusively (refused, naming the job); none starts meanwhile.
      const std::optional<io::OutputLock> lock = io::OutputLock::shared(o_.out_dir);
      m_ = io::read_manifest(o_.out_dir);
      check_shards();
      for (const std::string& p : io::manifest_count_problems(m_)) report_.problem(p);
      if (!m_.complete) report_.problem("the manifest marks the run incomplete");
      read_values();
      if (o_.token_stats) report_token_stats(sound_shards(), report_);
    } catch (const Error& e) {
      report_.problem(e.what());
    }
    return report_.finish();
  }

 private:
  // Every shard against the manifest (paths, sizes, checksums, shapes, attributes, filters, its
  // samples those of its entry, which read_manifest holds in dataset order) before any of its
  // values are read.
  void check_shards() {
    for (const io::ShardInfo& s : m_.shards) {
      const io::ShardFindings f = io::check_shard(o_.out_dir, s, m_, /*checksum=*/true);
      for (const std::string& p : f.problems) report_.problem(p);
      shard_files_.push_back(o_.out_dir / s.file);
      shard_sizes_.push_back(f.sound ? s.samples : 0);
    }
  }

  // The shards found sound that hold samples, in manifest order.
  std::vector<fs::path> sound_shards() const {
    std::vector<fs::path> files;
    for (std::size_t f = 0; f < shard_files_.size(); ++f)
      if (shard_sizes_[f] != 0) files.push_back(shard_files_[f]);
    return files;
  }

  // `count` samples of the sound shards (-1: all), chosen by --seed, in file order.
  std::vector<SampleRef> choose_samples(int64_t count) const {
    std::vector<SampleRef> chosen;
    for (std::size_t f = 0; f < shard_sizes_.size(); ++f)
      for (int64_t s = 0; s < shard_sizes_[f]; ++s) chosen.push_back({f, s});
    if (count >= 0 && std::size_t(count) < chosen.size()) {
      std::mt19937_64 rng(o_.seed);
      std::shuffle(chosen.begin(), chosen.end(), rng);
      chosen.resize(std::size_t(count));
      std::sort(chosen.begin(), chosen.end(),
                [](const SampleRef& a, const SampleRef& b) { return std::tie(a.shard, a.row) < std::tie(b.shard, b.row); });
    }
    return chosen;
  }

  // The model (--model, else the manifest's), checked against the manifest's identity; none when
  // its states could not be compared (another shape), which is reported.
  std::optional<Model> open_model() {
    const std::string dir = o_.model.empty() ? m_.model_dir : o_.model;
    const std::string config_path = (fs::path(dir) / "config.json").string();
    Model m{load_model_config(config_path), nullptr};
    if (sha256_file(config_path) != m_.config_sha256)
      report_.problem(cat("model '", dir, "': config.json differs from the one recorded in the manifest"));
    // States of another shape cannot be compared: stop before reading them with this model's sizes.
    if (m.cfg.hidden_size != m_.hidden_size || m.cfg.num_layers != m_.num_layers) {
      report_.problem(cat("model '", dir, "' has ", m.cfg.num_layers, " layers of hidden size ", m.cfg.hidden_size,
                          ", the manifest ", m_.num_layers, " of ", m_.hidden_size, ": its states are not compared"));
      return std::nullopt;
    }
    m.ckpt = std::make_unique<Checkpoint>(checkpoint_files(dir));
    if (m.ckpt->fingerprint() != m_.weights_fingerprint)
      report_.problem(cat("model '", dir, "': weights differ from the ones recorded in the manifest"));
    return m;
  }

  // One pass over the states of every sound shard, sample by sample in file order, so each stored
  // chunk is read and decoded once: every sample is scanned for NaN/Inf, the chosen ones are
  // recomputed (--samples) and scored through the LM head (--lm-head) as they come. A chunk that
  // cannot be decoded is a problem naming it; the shard's later samples are not read.
  void read_values() {
    std::vector<SampleRef> recompute, scored;
    if (o_.samples != 0) recompute = choose_samples(o_.samples);
    LmHeadPoint lm_point;
    if (o_.lm_head != 0) {
      lm_point = lm_head_point(m_);
      if (lm_point.index < 0)
        report_.problem("--lm-head needs the capture point 'final' or 'last' in the output");
      else
        scored = choose_samples(o_.lm_head);
    }
    std::optional<Model> model;
    std::unique_ptr<SampleRecompute> recomputer;
    std::optional<LmHeadScore> head;
    cpu::set_num_threads(o_.threads);
    if (!recompute.empty() || !scored.empty()) {
      try {
        model = open_model();
        if (model && !recompute.empty()) recomputer = std::make_unique<SampleRecompute>(*model->ckpt, model->cfg, m_);
        if (model && !scored.empty()) head.emplace(*model->ckpt, model->cfg, lm_point, int64_t(m_.points.size()));
      } catch (const Error& e) {  // the states are still scanned
        report_.problem(e.what());
        head.reset();
        recomputer.reset();
        model.reset();
      }
      if (!model) recompute.clear(), scored.clear();
    }
    std::size_t ri = 0, si = 0;
    for (std::size_t f = 0; f < shard_files_.size(); ++f) {
      if (shard_sizes_[f] == 0) continue;
      const std::string name = shard_files_[f].filename().string();
      try {
        const io::ShardReader r(shard_files_[f]);
        const std::vector<int64_t> off = r.sample_offsets(), index = r.sample_index();
        const std::vector<int32_t> ids = r.input_ids();
        const std::vector<uint8_t> mask = r.loss_mask();
        for (int64_t s = 0; s < shard_sizes_[f]; ++s) {
          const bool recomputed = ri < recompute.size() && recompute[ri].shard == f && recompute[ri].row == s;
          const bool scoring = si < scored.size() && scored[si].shard == f && scored[si].row == s;
          ri += recomputed;
          si += scoring;
          const int64_t t0 = off[std::size_t(s)], t1 = off[std::size_t(s) + 1];
          const std::vector<float> stored = r.hidden_states(t0, t1);  // [T, P, H]
          const auto bad = std::count_if(stored.begin(), stored.end(), [](float v) { return !std::isfinite(v); });
          if (bad) report_.problem(cat(name, ": sample ", index[std::size_t(s)], " has ", bad, " NaN/Inf values"));
          if (!recomputed && !scoring) continue;
          const auto T = std::size_t(t1 - t0);
          const std::string where = cat("sample ", index[std::size_t(s)], " (", name, " #", s, ", ", t1 - t0, " tokens)");
          const StoredSample sample{where, std::span(ids).subspan(std::size_t(t0), T),
                                    std::span(mask).subspan(std::size_t(t0), T), stored,
                                    recomputed && r.has_routing() ? r.routed_experts(t0, t1) : std::vector<int16_t>{}};
          if (recomputed) recomputer->check(sample, report_);
          if (scoring) head->score(sample);
        }
      } catch (const Error& e) {
        report_.problem(cat(name, ": ", e.what(), " (its later samples are not read)"));
      }
      while (ri < recompute.size() && recompute[ri].shard <= f) ++ri;
      while (si < scored.size() && scored[si].shard <= f) ++si;
    }
    if (!scored.empty()) head->report(o_.min_top1, report_);
  }

  const VerifyOptions& o_;
  VerifyReport report_;
  io::Manifest m_;
  std::vector<fs::path> shard_files_;
  std::vector<int64_t> shard_sizes_;  // samples per shard; 0 for a shard that is not sound
};

}  // namespace

int run_verify(const VerifyOptions& opts, std::ostream& out) { return Verifier(opts, out).run(); }

}  // namespace layertap::job
