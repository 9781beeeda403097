// Capture points (docs/FORMAT.md, "The capture convention `layertap-v1`"). A point names one
// residual-stream state; with L = num_hidden_layers its id is:
//   k in 0..L-1  the input to decoder layer k (0 = embedding output) = HF hidden_states[k]
//   L            "last": the output of the last decoder layer, before the final norm
//   L + 1        "final": after the final norm (what the LM head reads) = HF hidden_states[L]
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace layertap {

inline constexpr const char* kCaptureConvention = "layertap-v1";

struct CapturePoint {
  std::string spec;  // resolved name: "2", "16", "last" is written as its number L, "final"
  int64_t id = 0;    // see above
};

struct CapturePlan {
  std::string request;               // what the user asked for, e.g. "eagle3" or "2,16,last"
  int64_t num_layers = 0;            // L
  std::vector<CapturePoint> points;  // in the order requested; this is the P axis of the output
  // What the request does that is valid but likely unintended (a point repeated, e.g. eagle3 on a
  // model whose L/2 is 2): the caller logs them once its checks that can fail have passed.
  std::vector<std::string> warnings;

  int64_t final_id() const { return num_layers + 1; }
  // Human-readable meaning of a point, e.g. "input to decoder layer 2".
  std::string meaning(std::size_t p) const;
};

// Parses a comma-separated list of integers, "last", "final" and the preset "eagle3"
// (= 2, floor(L/2), L-3, final). Throws naming the offending item and the valid range.
CapturePlan resolve_capture(const std::string& request, int64_t num_layers);

}  // namespace layertap
