// What a verify run prints as it goes: one "PROBLEM ..." line per finding, and at the end the
// summary line that counts them and the recomputed samples.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>

namespace layertap::job {

class VerifyReport {
 public:
  explicit VerifyReport(std::ostream& out) : out_(out) {}

  void problem(const std::string& what) {
    ++problems_;
    out_ << "PROBLEM " << what << "\n";
  }
  void recomputed() { ++recomputed_; }
  std::ostream& out() { return out_; }

  // The summary line; the exit code: 0 without a problem, else 1.
  int finish() {
    out_ << (problems_ == 0 ? "OK" : "FAILED") << ": " << problems_ << " problem(s), " << recomputed_
         << " sample(s) recomputed\n";
    return problems_ == 0 ? 0 : 1;
  }

 private:
  std::ostream& out_;
  int problems_ = 0;
  int64_t recomputed_ = 0;
};

}  // namespace layertap::job
