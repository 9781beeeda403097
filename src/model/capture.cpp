#include "model/capture.hpp"

#include <charconv>
#include <map>
#include <sstream>

#include "core/error.hpp"
#include "core/text.hpp"

namespace layertap {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

void add_layer_point(CapturePlan& plan, const std::string& item, int64_t k) {
  const int64_t L = plan.num_layers;
  LT_CHECK(k >= 0 && k <= L, "capture point '", item, "' is outside 0..", L,
           " (the model has ", L, " decoder layers; use 0..", L - 1,
           " for a layer's input, ", L, " or 'last' for the last layer's output, 'final' after the final norm)");
  plan.points.push_back({std::to_string(k), k});
}

}  // namespace

std::string CapturePlan::meaning(std::size_t p) const {
  const int64_t id = points.at(p).id;
  if (id == 0) return "embedding output (input to decoder layer 0)";
  if (id < num_layers) return cat("input to decoder layer ", id);
  if (id == num_layers) return cat("output of the last decoder layer ", num_layers - 1, ", before the final norm");
  return "after the final norm";
}

CapturePlan resolve_capture(const std::string& request, int64_t num_layers) {
  LT_CHECK(num_layers > 0, "cannot resolve capture points for a model with no layers");
  CapturePlan plan;
  plan.request = request;
  plan.num_layers = num_layers;
  const int64_t L = num_layers;
  std::stringstream ss(request);
  std::string raw;
  while (std::getline(ss, raw, ',')) {
    const std::string item = trim(raw);
    LT_CHECK(!item.empty(), "empty item in capture list '", request, "'");
    if (item == "final") {
      plan.points.push_back({"final", L + 1});
    } else if (item == "last") {
      add_layer_point(plan, item, L);
    } else if (item == "eagle3") {
      LT_CHECK(L >= 3, "the eagle3 preset needs at least 3 decoder layers, the model has ", L);
      add_layer_point(plan, item, 2);
      add_layer_point(plan, item, L / 2);
      add_layer_point(plan, item, L - 3);
      plan.points.push_back({"final", L + 1});
    } else {
      int64_t k = 0;
      const char* end = item.data() + item.size();
      auto [ptr, ec] = std::from_chars(item.data(), end, k);
      LT_CHECK(ec == std::errc() && ptr == end, "unknown capture point '", item,
               "' (expected an integer layer index, 'last', 'final' or the preset 'eagle3')");
      add_layer_point(plan, item, k);
    }
  }
  LT_CHECK(!plan.points.empty(), "no capture points requested");
  // One warning per repeated point (not one per pair: 300 copies would print 44,850 lines).
  std::map<int64_t, std::vector<std::size_t>> positions;  // id -> where it is stored
  for (std::size_t a = 0; a < plan.points.size(); ++a) positions[plan.points[a].id].push_back(a);
  for (const auto& [id, at] : positions)
    if (at.size() > 1)
      plan.warnings.push_back(cat("capture point ", plan.points[at[0]].spec, " appears ", at.size(), " times in '",
                                  excerpt(request), "' (first at positions ", at[0], " and ", at[1],
                                  "); it is stored at each position"));
  return plan;
}

}  // namespace layertap
