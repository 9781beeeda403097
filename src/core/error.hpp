// Error type and check macros. Every failure the user can cause becomes a layertap::Error whose
// message names the sample, file or tensor involved; main() logs it with the rank and exits non-zero.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace layertap {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Concatenate any streamable values into one string (no fixed-size buffers).
template <typename... Args>
std::string cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

}  // namespace layertap

#define LT_FAIL(...) throw ::layertap::Error(::layertap::cat(__VA_ARGS__))
#define LT_CHECK(cond, ...)   \
  do {                        \
    if (!(cond)) LT_FAIL(__VA_ARGS__); \
  } while (0)
