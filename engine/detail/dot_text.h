// DOT text: how the engine's pictures (Graph::write_dot, Engine::InFlightReportDot) quote what they print, so that an
// op's name, whatever characters it holds, is one Graphviz string.
//
// Thread safety: pure functions. Allocation: the returned string.
#pragma once

#include <string>
#include <string_view>

namespace depengine::detail {

// `text` as a DOT quoted string, quotes included: '"' and '\' escaped, a line break as DOT's "\n", other control
// characters dropped (a name is a label, not layout).
[[nodiscard]] inline std::string dot_quoted(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) >= 0x20) {
      out += c;
    }
  }
  return out + '"';
}

}  // namespace depengine::detail
