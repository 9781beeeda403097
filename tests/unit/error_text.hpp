// Test helpers for error messages: the text of the layertap::Error a call throws, and whether a
// message holds a part. Header-only; not a test file itself.
#pragma once
#include <functional>
#include <string>

#include "core/error.hpp"

namespace layertap::test {

// The message of the layertap::Error that `f` throws, or "" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline bool has(const std::string& error, const std::string& part) { return error.find(part) != std::string::npos; }

}  // namespace layertap::test
