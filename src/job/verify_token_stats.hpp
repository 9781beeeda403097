// verify --token-stats: frequencies of the loss-masked tokens, what an EAGLE-3 trainer builds its
// draft vocabulary from.
#pragma once
#include <filesystem>
#include <vector>

#include "job/verify_report.hpp"

namespace layertap::job {

// Over the shards given (those found sound): the count of masked and distinct ids, how much of the
// masked tokens the 1k/8k/32k most frequent cover, the ten most frequent. A shard that cannot be
// read is a problem and is left out.
void report_token_stats(const std::vector<std::filesystem::path>& shards, VerifyReport& report);

}  // namespace layertap::job
