// The checks of the GPU folder's host tests (plain executables, no GoogleTest, so that the
// core-only device build needs nothing more): each prints "ok"/"FAIL" with what it checked and
// counts failures; main returns finish().
#pragma once
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace layertap::test {

inline int& failures() {
  static int n = 0;
  return n;
}

inline void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  failures() += ok ? 0 : 1;
}

// `f` must throw a layertap::Error whose message holds every one of `needles`.
inline void check_throws(const std::string& what, const std::function<void()>& f,
                         const std::vector<std::string>& needles) {
  try {
    f();
    check(false, what + ": did not throw");
  } catch (const Error& e) {
    bool all = true;
    for (const std::string& n : needles) all &= std::string(e.what()).find(n) != std::string::npos;
    check(all, what + ": " + e.what());
  }
}
inline void check_throws(const std::string& what, const std::function<void()>& f, const std::string& needle) {
  check_throws(what, f, std::vector<std::string>{needle});
}

// PASS or FAILED (n), and main's exit code.
inline int finish() {
  std::printf(failures() == 0 ? "PASS\n" : "FAILED (%d)\n", failures());
  return failures() == 0 ? 0 : 1;
}

}  // namespace layertap::test
