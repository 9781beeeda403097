#include "core/text.hpp"

#include <ctime>
#include <iterator>
#include <sstream>

namespace layertap {

std::string human_bytes(int64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = double(bytes);
  std::size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(units)) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return std::to_string(bytes) + " B";
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << v << " " << units[u];
  return os.str();
}

std::string zero_pad(int64_t value, int width) {
  std::string digits = std::to_string(value);
  if (int(digits.size()) < width) digits.insert(0, std::size_t(width) - digits.size(), '0');
  return digits;
}

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(digits);
  os << v;
  return os.str();
}

std::string gib(std::size_t bytes) { return fixed(double(bytes) / double(std::size_t(1) << 30), 2) + " GiB"; }

std::string excerpt(std::string_view s, std::size_t max_chars) {
  if (s.size() <= max_chars) return std::string(s);
  return std::string(s.substr(0, max_chars)) + "... (" + std::to_string(s.size()) + " bytes)";
}

std::string utc_timestamp() {
  const std::time_t t = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buf;
}

}  // namespace layertap
