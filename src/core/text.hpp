// Small text formatting shared by the commands' logs and reports.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace layertap {

// "1.5 GiB", "312.0 KiB", "17 B"
std::string human_bytes(int64_t bytes);

// The current time in UTC, ISO 8601 to the second: "2026-12-02T06:15:22Z".
std::string utc_timestamp();

// `value` in decimal, left-padded with zeros to at least `width` digits: zero_pad(7, 5) = "00007".
std::string zero_pad(int64_t value, int width);

// `v` with `digits` digits after the point: fixed(2.345, 1) = "2.3".
std::string fixed(double v, int digits);
// `bytes` in GiB with two decimals: gib(3 << 29) = "1.50 GiB".
std::string gib(std::size_t bytes);

// `s` when at most `max_chars` long, else its first `max_chars` characters followed by
// "... (N bytes)": user data quoted in an error message stays readable however large it is.
std::string excerpt(std::string_view s, std::size_t max_chars = 64);

}  // namespace layertap
