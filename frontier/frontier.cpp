#include <ostream>

#include <depengine/frontier/frontier.h>

namespace depengine::detail {

std::string format_frontier(std::span<const FrontierEntry> entries, bool tainted) {
  std::string out = "{";
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) out += ", ";
    out += to_string(entries[i].axis) + ":" + std::to_string(entries[i].epoch);
  }
  out += "}";
  if (tainted) out += " tainted";
  return out;
}

}  // namespace depengine::detail
