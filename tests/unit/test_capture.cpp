#include <gtest/gtest.h>

#include "core/error.hpp"
#include "model/capture.hpp"

namespace layertap {
namespace {

std::vector<int64_t> ids(const CapturePlan& p) {
  std::vector<int64_t> out;
  for (const auto& pt : p.points) out.push_back(pt.id);
  return out;
}

std::string error_of(const std::string& request, int64_t L) {
  try {
    resolve_capture(request, L);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Capture, Eagle3ExpandsToTwoHalfLMinusThreeFinal) {
  EXPECT_EQ(ids(resolve_capture("eagle3", 32)), (std::vector<int64_t>{2, 16, 29, 33}));
  EXPECT_EQ(ids(resolve_capture("eagle3", 36)), (std::vector<int64_t>{2, 18, 33, 37}));
  EXPECT_EQ(ids(resolve_capture("eagle3", 5)), (std::vector<int64_t>{2, 2, 2, 6}));  // floor(5/2) = 2
}

TEST(Capture, ListsLastAndFinalKeepTheirOrder) {
  const CapturePlan p = resolve_capture(" final, 0 ,last,3", 4);
  EXPECT_EQ(ids(p), (std::vector<int64_t>{5, 0, 4, 3}));
  EXPECT_EQ(p.points[0].spec, "final");
  EXPECT_EQ(p.points[2].spec, "4");
  EXPECT_EQ(p.request, " final, 0 ,last,3");
  EXPECT_NE(p.meaning(2).find("before the final norm"), std::string::npos);
}

TEST(Capture, RejectsUnknownAndOutOfRangePointsWithTheirName) {
  EXPECT_NE(error_of("2,middle", 8).find("'middle'"), std::string::npos);
  EXPECT_NE(error_of("9", 8).find("outside 0..8"), std::string::npos);
  EXPECT_NE(error_of("-1", 8).find("'-1'"), std::string::npos);
  EXPECT_NE(error_of("2,,3", 8).find("empty item"), std::string::npos);
  EXPECT_NE(error_of("1.5", 8).find("'1.5'"), std::string::npos);
  EXPECT_NE(error_of("", 8), "");
}

// A repeated point is valid (stored at each position) but worth a warning, which the plan carries
// for the caller to log after its checks: one per repeated point, none for distinct points.
TEST(Capture, RepeatedPointsAreReportedNotLogged) {
  const CapturePlan p = resolve_capture("eagle3", 4);  // 2, 4/2 = 2, 4 - 3 = 1, final
  ASSERT_EQ(p.warnings.size(), 1u);
  EXPECT_NE(p.warnings[0].find("capture point 2 appears 2 times in 'eagle3'"), std::string::npos) << p.warnings[0];
  EXPECT_TRUE(resolve_capture("eagle3", 61).warnings.empty());
  EXPECT_EQ(resolve_capture("1,1,1,2,2", 8).warnings.size(), 2u);
}

}  // namespace layertap
