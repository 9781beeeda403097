#include "cli/verify.hpp"

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <iostream>
#include <iomanip>
#include <map>
#include <numeric>
#include <optional>
#include <random>

#include "backend/cpu/cpu_backend.hpp"
#include "comm/tp_comm.hpp"
#include "core/digest.hpp"
#include "core/error.hpp"
#include "core/state_compare.hpp"
#include "core/text.hpp"
#include "io/output_check.hpp"
#include "io/output_lock.hpp"
#include "io/shard_reader.hpp"
#include "model/lm_head.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"

namespace layertap::cli {
namespace {

namespace fs = std::filesystem;
namespace po = boost::program_options;

struct SampleRef {
  std::size_t shard;  // position in the manifest's shard list
  int64_t row;        // sample position inside the shard
};

class Verifier {
 public:
  Verifier(const VerifyOptions& o, std::ostream& out) : o_(o), out_(out) {}

  int run() {
    // Whatever is wrong with the output, verify ends with its summary line.
    try {
      // Shared: a job writing the output holds it exclusively (refused, naming the job); none starts meanwhile.
      const std::optional<io::OutputLock> lock = io::OutputLock::shared(o_.out_dir);
      m_ = io::read_manifest(o_.out_dir);
      check_shards();
      for (const std::string& p : io::manifest_count_problems(m_)) problem(p);
      if (!m_.complete) problem("the manifest marks the run incomplete");
      read_values();
      if (o_.token_stats) token_stats();
    } catch (const Error& e) {
      problem(e.what());
    }
    out_ << (problems_ == 0 ? "OK" : "FAILED") << ": " << problems_ << " problem(s), " << checked_samples_
         << " sample(s) recomputed\n";
    return problems_ == 0 ? 0 : 1;
  }

 private:
  void problem(const std::string& what) {
    ++problems_;
    out_ << "PROBLEM " << what << "\n";
  }

  // Every shard against the manifest (paths, sizes, checksums, shapes, attributes, filters) before
  // any of its values are read; then the sample order of the shards found sound.
  void check_shards() {
    int64_t samples = 0, tokens = 0, last_index = -1;
    bool all_sound = true;
    for (const io::ShardInfo& s : m_.shards) {
      const io::ShardFindings f = io::check_shard(o_.out_dir, s, m_, /*checksum=*/true);
      for (const std::string& p : f.problems) problem(p);
      shard_files_.push_back(o_.out_dir / s.file);
      shard_sizes_.push_back(0);
      all_sound = all_sound && f.sound;
      if (!f.sound) continue;
      try {
        const io::ShardReader r(shard_files_.back());
        for (int64_t idx : r.sample_index()) {
          if (idx <= last_index) problem(cat(s.file, ": sample index ", idx, " is out of order (after ", last_index, ")"));
          last_index = idx;
        }
        shard_sizes_.back() = r.num_samples();
        samples += r.num_samples();
        tokens += r.num_tokens();
      } catch (const Error& e) {
        problem(cat(s.file, ": ", e.what()));
        all_sound = false;
      }
    }
    if (all_sound && (samples != m_.total_samples || tokens != m_.total_tokens))
      problem(cat("the shards hold ", samples, " samples and ", tokens, " tokens, the manifest totals say ",
                  m_.total_samples, " and ", m_.total_tokens));
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

  struct Model {
    ModelConfig cfg;
    std::unique_ptr<Checkpoint> ckpt;
  };

  // The model (--model, else the manifest's), checked against the manifest's identity; none when
  // its states could not be compared (another shape), which is reported.
  std::optional<Model> open_model() {
    const std::string dir = o_.model.empty() ? m_.model_dir : o_.model;
    const std::string config_path = (fs::path(dir) / "config.json").string();
    Model m{load_model_config(config_path), nullptr};
    if (sha256_file(config_path) != m_.config_sha256)
      problem(cat("model '", dir, "': config.json differs from the one recorded in the manifest"));
    // States of another shape cannot be compared: stop before reading them with this model's sizes.
    if (m.cfg.hidden_size != m_.hidden_size || m.cfg.num_layers != m_.num_layers) {
      problem(cat("model '", dir, "' has ", m.cfg.num_layers, " layers of hidden size ", m.cfg.hidden_size,
                  ", the manifest ", m_.num_layers, " of ", m_.hidden_size, ": its states are not compared"));
      return std::nullopt;
    }
    m.ckpt = std::make_unique<Checkpoint>(checkpoint_files(dir));
    if (m.ckpt->fingerprint() != m_.weights_fingerprint)
      problem(cat("model '", dir, "': weights differ from the ones recorded in the manifest"));
    return m;
  }

  // Frequencies of the loss-masked tokens over every sound shard: what an EAGLE-3 trainer builds its
  // draft vocabulary from.
  void token_stats() {
    std::map<int32_t, int64_t> count;
    int64_t masked = 0;
    for (std::size_t f = 0; f < shard_files_.size(); ++f) {
      if (shard_sizes_[f] == 0) continue;
      std::vector<int32_t> ids;
      std::vector<uint8_t> mask;
      try {
        const io::ShardReader r(shard_files_[f]);
        ids = r.input_ids();
        mask = r.loss_mask();
      } catch (const Error& e) {
        problem(cat(shard_files_[f].filename().string(), ": ", e.what(), " (left out of the token statistics)"));
        continue;
      }
      for (std::size_t t = 0; t < ids.size(); ++t)
        if (mask[t]) {
          ++count[ids[t]];
          ++masked;
        }
    }
    std::vector<int64_t> freq;
    for (const auto& [id, n] : count) freq.push_back(n);
    std::sort(freq.rbegin(), freq.rend());
    out_ << "tokens: " << masked << " loss-masked, " << count.size() << " distinct";
    for (std::size_t k : {1000, 8000, 32000}) {
      if (count.size() <= k / 2) continue;
      const int64_t covered = std::accumulate(freq.begin(), freq.begin() + long(std::min(k, freq.size())), int64_t(0));
      out_ << "; the " << k << " most frequent cover " << fixed(100.0 * double(covered) / double(masked), 2) << "%";
    }
    out_ << "\n";
    std::vector<std::pair<int64_t, int32_t>> top;
    for (const auto& [id, n] : count) top.push_back({n, id});
    std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
    out_ << "tokens: most frequent (id x count):";
    for (std::size_t i = 0; i < std::min<std::size_t>(10, top.size()); ++i)
      out_ << " " << top[i].second << "x" << top[i].first;
    out_ << "\n";
  }

  // Where --lm-head reads: the `final` point, else `last` (through the final norm); -1 when neither.
  int64_t lm_head_point(bool& use_final) const {
    const int64_t L = m_.num_layers;
    const std::vector<int64_t> ids = m_.point_ids();
    const auto final_at = std::find(ids.begin(), ids.end(), L + 1);
    const auto last_at = std::find(ids.begin(), ids.end(), L);
    use_final = final_at != ids.end();
    if (!use_final && last_at == ids.end()) return -1;
    return (use_final ? final_at : last_at) - ids.begin();
  }

  // One pass over the states of every sound shard, sample by sample in file order, so each stored
  // chunk is read and decoded once: every sample is scanned for NaN/Inf, the chosen ones are
  // recomputed (--samples) and scored through the LM head (--lm-head) as they come. A chunk that
  // cannot be decoded is a problem naming it; the shard's later samples are not read.
  void read_values() {
    std::vector<SampleRef> recompute, scored;
    if (o_.samples != 0) recompute = choose_samples(o_.samples);
    bool use_final = false;
    int64_t lm_point = -1;
    if (o_.lm_head != 0) {
      lm_point = lm_head_point(use_final);
      if (lm_point < 0)
        problem("--lm-head needs the capture point 'final' or 'last' in the output");
      else
        scored = choose_samples(o_.lm_head);
    }
    std::optional<Model> model;
    SoloComm comm;
    std::unique_ptr<CpuBackend> backend;
    std::optional<LmHead> head;
    CapturePlan plan;
    cpu::set_num_threads(o_.threads);
    if (!recompute.empty() || !scored.empty()) {
      try {
        model = open_model();
        if (model && !recompute.empty()) {
          backend = std::make_unique<CpuBackend>(model->cfg, load_weights(*model->ckpt, model->cfg, TpShard{}), comm);
          plan.request = m_.capture_request;
          plan.num_layers = model->cfg.num_layers;
          for (const io::ManifestPoint& p : m_.points) plan.points.push_back({p.spec, p.id});
        }
        if (model && !scored.empty()) head.emplace(*model->ckpt, model->cfg);
      } catch (const Error& e) {  // the states are still scanned
        problem(e.what());
        head.reset();
        backend.reset();
        model.reset();
      }
      if (!model) recompute.clear(), scored.clear();
    }
    NextTokenStats stats;
    int64_t scored_samples = 0;
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
          if (bad) problem(cat(name, ": sample ", index[std::size_t(s)], " has ", bad, " NaN/Inf values"));
          const std::string where = cat("sample ", index[std::size_t(s)], " (", name, " #", s, ", ", t1 - t0, " tokens)");
          if (recomputed) compare_sample(*backend, plan, model->cfg, where, ids, t0, t1, stored);
          if (scoring) {
            score_sample(*head, lm_point, use_final, ids, mask, t0, t1, stored, stats);
            ++scored_samples;
          }
        }
      } catch (const Error& e) {
        problem(cat(name, ": ", e.what(), " (its later samples are not read)"));
      }
      while (ri < recompute.size() && recompute[ri].shard <= f) ++ri;
      while (si < scored.size() && scored[si].shard <= f) ++si;
    }
    if (scored.empty()) return;
    out_ << "lm head: " << scored_samples << " sample(s), " << stats.tokens
         << " loss-masked next tokens predicted from '"
         << (use_final ? "final" : "last' through the final norm, as 'final") << "': top-1 agreement "
         << fixed(100 * stats.top1_rate(), 2) << "%, perplexity " << std::setprecision(6) << stats.perplexity() << "\n";
    if (stats.top1_rate() < o_.min_top1)
      problem(cat("lm head: top-1 agreement ", fixed(100 * stats.top1_rate(), 2), "% is below --min-top1 ",
                  fixed(100 * o_.min_top1, 2), "%: a wrong layer, model or token alignment?"));
  }

  // The stored `final` states (or `last` through the final norm) of one sample through the LM head,
  // each position predicting the next token where that token is loss-masked.
  void score_sample(const LmHead& head, int64_t p, bool use_final, const std::vector<int32_t>& ids,
                    const std::vector<uint8_t>& mask, int64_t t0, int64_t t1, const std::vector<float>& stored,
                    NextTokenStats& stats) const {
    const auto P = int64_t(m_.points.size());
    const int64_t H = m_.hidden_size;
    std::vector<float> states;  // [n, H]: positions whose next token is masked
    std::vector<int32_t> targets;
    for (int64_t t = t0; t + 1 < t1; ++t) {
      if (!mask[std::size_t(t + 1)]) continue;
      const float* row = stored.data() + ((t - t0) * P + p) * H;
      states.insert(states.end(), row, row + H);
      targets.push_back(ids[std::size_t(t + 1)]);
    }
    if (!use_final) head.final_norm(states.data(), int64_t(targets.size()));
    head.score(states.data(), targets.data(), int64_t(targets.size()), stats);
  }

  // Recomputes one sample from its stored tokens and compares every capture point.
  void compare_sample(CpuBackend& backend, const CapturePlan& plan, const ModelConfig& cfg, const std::string& where,
                      const std::vector<int32_t>& ids, int64_t t0, int64_t t1, const std::vector<float>& stored) {
    const int64_t T = t1 - t0, H = cfg.hidden_size;
    PackedBatch batch;
    batch.tokens.assign(ids.begin() + t0, ids.begin() + t1);
    if (std::any_of(batch.tokens.begin(), batch.tokens.end(), [&](int32_t t) { return t < 0 || t >= cfg.vocab_size; })) {
      problem(cat(where, ": stored token ids outside the model's vocabulary [0, ", cfg.vocab_size, ")"));
      return;
    }
    batch.offsets = {0, T};
    const auto states = backend.forward(batch, plan, DType::F32);
    const DType storage = io::parse_storage_dtype(m_.storage_dtype);
    const int64_t P = int64_t(plan.points.size());
    // Per element, in steps of the storage type (core/state_compare.hpp): every corruption verify
    // looks for (swapped or shifted points, last for final, shifted tokens, exchanged samples)
    // moves elements by many steps.
    if (m_.run.backend == "cuda") {  // a bf16 forward: held per point to kBf16ForwardBound
      double worst_err = 0;
      std::string worst_point;
      for (int64_t p = 0; p < P; ++p) {
        const auto* want = reinterpret_cast<const float*>(states[std::size_t(p)].data());  // [T, H]
        const double err = relative_frobenius(stored.data() + p * H, P * H, want, T, H);
        if (!(err <= worst_err)) {
          worst_err = err;
          worst_point = plan.points[std::size_t(p)].spec;
        }
      }
      ++checked_samples_;
      if (!(worst_err <= kBf16ForwardBound))
        problem(cat(where, ": recomputed states differ at point ", worst_point, ": relative error ", worst_err,
                    " (written by the cuda backend: bound ", kBf16ForwardBound, ")"));
      else
        out_ << "ok " << where << ": worst relative error " << worst_err << " (point " << worst_point
             << ", cuda backend: bound " << kBf16ForwardBound << ")\n";
      return;
    }
    StateMismatch worst;
    std::string worst_point;
    for (int64_t p = 0; p < P; ++p) {
      const auto* want = reinterpret_cast<const float*>(states[std::size_t(p)].data());  // [T, H]
      const StateMismatch m = compare_states(stored.data() + p * H, P * H, want, T, H, storage);
      if (!(m.ratio <= worst.ratio)) {
        worst = m;
        worst_point = plan.points[std::size_t(p)].spec;
      }
    }
    ++checked_samples_;
    if (!(worst.ratio <= 1))
      problem(cat(where, ": recomputed states differ at point ", worst_point, ": token ", worst.row, " dim ",
                  worst.col, " stored ", worst.stored, ", recomputed ", worst.recomputed, ", ", worst.ratio,
                  " times the allowed ", worst.allowed));
    else
      out_ << "ok " << where << ": worst element at " << worst.ratio << " of the allowed difference"
           << (worst_point.empty() ? "" : " (point " + worst_point + ")") << "\n";
  }

  const VerifyOptions& o_;
  std::ostream& out_;
  io::Manifest m_;
  int problems_ = 0;
  int64_t checked_samples_ = 0;
  std::vector<fs::path> shard_files_;
  std::vector<int64_t> shard_sizes_;  // samples per shard; 0 for a shard that is not sound
};

}  // namespace

// `--lm-head` without a count: enough samples for a stable top-1 figure, seconds on the CPU.
constexpr int64_t kLmHeadSamples = 64;

bool parse_verify_options(const std::vector<std::string>& args, VerifyOptions& o, std::ostream& out) {
  po::options_description desc("Options");
  std::string dir;
  desc.add_options()
      ("out", po::value(&dir)->required(), "output directory to verify (also the first positional argument)")
      ("samples", po::value(&o.samples)->default_value(o.samples),
       "samples to recompute with the model and compare at every capture point (0 = none, -1 = all)")
      ("seed", po::value(&o.seed)->default_value(o.seed), "seed that chooses the samples")
      ("model", po::value(&o.model), "model directory (default: the one recorded in the manifest)")
      ("threads", po::value(&o.threads)->default_value(o.threads), "CPU threads for matrix products (0 = all cores)")
      ("lm-head", po::value(&o.lm_head)->default_value(o.lm_head)->implicit_value(kLmHeadSamples),
       "samples (-1 = all; given alone: 64) whose stored 'final' states (or 'last' through the final norm) go "
       "through the checkpoint's LM head: top-1 agreement with the next loss-masked token and the perplexity")
      ("min-top1", po::value(&o.min_top1)->default_value(o.min_top1),
       "with --lm-head: fail when the top-1 agreement (a fraction, e.g. 0.3) is lower")
      ("token-stats", po::bool_switch(&o.token_stats),
       "frequencies of the loss-masked tokens: distinct ids, the coverage of the most frequent 1k/8k/32k "
       "(the draft vocabulary EAGLE-3 trainers build), the top ids")
      ("help,h", "print this help");
  po::positional_options_description pos;
  pos.add("out", 1);
  // `--lm-head` may stand alone (implicit 64), so Boost would not take a following "-1" as its value:
  // a number after it is joined to it ("--lm-head=-1").
  std::vector<std::string> joined;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const bool number_follows = i + 1 < args.size() && !args[i + 1].empty() &&
                                args[i + 1].find_first_not_of("-0123456789") == std::string::npos &&
                                args[i + 1].find_first_of("0123456789") != std::string::npos;
    if (args[i] == "--lm-head" && number_follows) {
      joined.push_back("--lm-head=" + args[++i]);
    } else {
      joined.push_back(args[i]);
    }
  }
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(joined).options(desc).positional(pos).run(), vm);
    if (vm.count("help")) {
      out << "Usage: layertap verify OUTDIR [--samples N] [--seed S] [--model DIR] [--threads N]\n"
             "                       [--lm-head [N]] [--min-top1 F] [--token-stats]\n\n"
             "Checks manifest.json against every shard (counts, offsets, shapes, attributes, sizes, SHA-256,\n"
             "NaN/Inf) and recomputes a seeded random subset of samples on the CPU at TP 1, comparing every\n"
             "capture point, element by element: one bf16 step (1e-4 relative for float32 output, one e4m3\n"
             "step at the row's scale more for float8) plus 1e-4 of the row's median magnitude; an output\n"
             "the cuda backend wrote (bf16 arithmetic) per point, to a relative error of 5e-2. Exits 1 on\n"
             "any problem.\n\n"
          << desc << "\n";
      return false;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    LT_FAIL(e.what(), " (see 'layertap verify --help')");
  }
  LT_CHECK(o.samples >= -1, "--samples must be -1 (all), 0 or positive");
  LT_CHECK(o.lm_head >= -1, "--lm-head must be -1 (all), 0 or positive");
  LT_CHECK(o.min_top1 >= 0 && o.min_top1 <= 1, "--min-top1 must be a fraction in [0, 1]");
  o.out_dir = dir;
  return true;
}

int run_verify(const VerifyOptions& o, std::ostream& out) { return Verifier(o, out).run(); }

}  // namespace layertap::cli
