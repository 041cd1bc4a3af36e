// Reading benchmark records back: the inverse of write_json (report.h), for drivers that run other benchmark
// executables and merge what they wrote (bench/peers/runner).
//
// Only the format write_json produces is accepted: an array of flat objects whose values are numbers or strings
// (quote and backslash escaped by a backslash). Keys other than Record's are ignored; a missing key keeps Record's
// default.
//
// Thread safety: none needed (pure functions). Allocation: freely.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "bench/common/report.h"

namespace depengine::bench {

// Parses `text`. Throws std::runtime_error naming the offset of the first thing it could not read.
std::vector<Record> parse_records(std::string_view text);

// Reads and parses the file at `path`. Throws std::runtime_error if it cannot be read or parsed.
std::vector<Record> read_json(const std::string& path);

}  // namespace depengine::bench
