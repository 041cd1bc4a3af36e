// The error flag that travels with every message and collective of the MPI executor's users (distributed/), so that
// an error on one rank reaches every rank instead of leaving the others waiting.
//
// A rank whose input carries an error still takes part in the communication, with a RankError naming itself and the
// error's text (or kNone). A collective counts the failing ranks with its data; when some failed, the ranks exchange
// their flags (MpiExecutor::exchange_errors) and all keep the lowest failing rank's, so every rank learns the same
// error. A message carries the sender's flag ahead of its data.
//
// A plain, fixed-size value (sent as bytes): the text is cut to kTextBytes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>

namespace depengine {

struct RankError {
  static constexpr std::int32_t kNone = std::numeric_limits<std::int32_t>::max();  // no rank failed
  // The most bytes of the error's text a flag carries.
  static constexpr std::size_t kTextBytes = 244;

  std::int32_t rank = kNone;  // the failing rank, or kNone
  std::int32_t sender = 0;    // the rank that sent this flag (a flag may name another rank, whose error flowed on)
  std::uint32_t length = 0;   // bytes of text used
  // The error's text, cut to kTextBytes.
  char text[kTextBytes] = {};

  // Whether a rank failed, and its error's text.
  [[nodiscard]] bool failed() const noexcept { return rank != kNone; }
  [[nodiscard]] std::string_view message() const noexcept { return {text, length}; }
  // The order every rank picks the same flag by: the lowest failing rank, then the lowest sender.
  [[nodiscard]] bool precedes(const RankError& other) const noexcept {
    return rank != other.rank ? rank < other.rank : sender < other.sender;
  }
  // Marks `failing_rank` as failed with `message` (cut to kTextBytes).
  void set(std::int32_t failing_rank, std::string_view message) noexcept {
    rank = failing_rank;
    length = static_cast<std::uint32_t>(std::min(message.size(), kTextBytes));
    std::copy_n(message.data(), length, text);
  }
};

static_assert(sizeof(RankError) == 256, "a RankError is sent as 256 bytes");

}  // namespace depengine
