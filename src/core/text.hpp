// Small text formatting shared by the commands' logs and reports.
#pragma once
#include <cstdint>
#include <string>

namespace layertap {

// "1.5 GiB", "312.0 KiB", "17 B"
std::string human_bytes(int64_t bytes);

// `value` in decimal, left-padded with zeros to at least `width` digits: zero_pad(7, 5) = "00007".
std::string zero_pad(int64_t value, int width);

}  // namespace layertap
