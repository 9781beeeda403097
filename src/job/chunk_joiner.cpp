#include "job/chunk_joiner.hpp"

#include "core/error.hpp"

namespace layertap::job {

std::vector<std::size_t> samples_ending_in(const Batch& batch, const std::vector<int64_t>& lengths) {
  std::vector<std::size_t> ending;
  for (const Segment& s : batch)
    if (s.end == lengths[s.sample]) ending.push_back(s.sample);
  return ending;
}

std::vector<std::vector<std::byte>> ChunkJoiner::join(const Batch& batch, const std::vector<int64_t>& lengths,
                                                      std::vector<std::vector<std::byte>> states) {
  const bool continues = batch.front().begin > 0, continued = batch.back().end < lengths[batch.back().sample];
  LT_CHECK(continues == !held_.empty() || states.empty(), "chunked prefill: a batch ",
           continues ? "continues a sample none of whose rows are held" : "starts while a sample is in flight");
  if (states.empty() || (!continues && !continued)) return states;  // every sample whole
  int64_t T = 0;
  for (const Segment& s : batch) T += s.tokens();
  const auto bytes = [&](int64_t rows) { return std::size_t(rows * row_bytes_); };
  const int64_t tail = continued ? batch.back().tokens() : 0;  // rows held back for the next batch
  if (batch.size() == 1 && continues && continued) {           // a middle chunk: all of it is held
    for (std::size_t p = 0; p < states.size(); ++p)
      held_[p].insert(held_[p].end(), states[p].begin(), states[p].end());
    return std::vector<std::vector<std::byte>>(states.size());
  }
  std::vector<std::vector<std::byte>> whole(states.size()), next(continued ? states.size() : 0);
  for (std::size_t p = 0; p < states.size(); ++p) {
    LT_CHECK(states[p].size() == bytes(T), "chunked prefill: point ", p, " holds ", states[p].size(),
             " bytes for ", T, " tokens");
    const auto first = states[p].begin(), cut = states[p].end() - long(bytes(tail));
    if (continues) whole[p] = std::move(held_[p]);
    whole[p].insert(whole[p].end(), first, cut);
    if (continued) next[p].assign(cut, states[p].end());
  }
  held_ = std::move(next);
  return whole;
}

}  // namespace layertap::job
