#include "bench/common/read_records.h"

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace depengine::bench {
namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  std::vector<Record> records() {
    std::vector<Record> out;
    expect('[');
    if (peek() == ']') {
      ++pos_;
      return out;
    }
    for (;;) {
      out.push_back(record());
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(']');
      return out;
    }
  }

 private:
  Record record() {
    Record r;
    expect('{');
    for (;;) {
      const std::string key = string();
      expect(':');
      if (key == "workload") {
        r.workload = string();
      } else if (key == "system") {
        r.system = string();
      } else if (key == "threads") {
        r.threads = static_cast<int>(number());
      } else if (key == "ns_per_op") {
        r.ns_per_op = number();
      } else if (key == "runs") {
        r.runs = static_cast<int>(number());
      } else if (peek() == '"') {
        string();
      } else {
        number();
      }
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect('}');
      return r;
    }
  }

  std::string string() {
    expect('"');
    std::string out;
    while (pos_ < text_.size() && text_[pos_] != '"') {
      if (text_[pos_] == '\\') ++pos_;
      if (pos_ < text_.size()) out += text_[pos_++];
    }
    expect('"');
    return out;
  }

  double number() {
    skip_space();
    const std::string rest(text_.substr(pos_, 64));
    char* end = nullptr;
    const double value = std::strtod(rest.c_str(), &end);
    if (end == rest.c_str()) fail("a number");
    pos_ += static_cast<std::size_t>(end - rest.c_str());
    return value;
  }

  char peek() {
    skip_space();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("'") + c + "'");
    ++pos_;
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("benchmark records: expected " + what + " at offset " + std::to_string(pos_));
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace

std::vector<Record> parse_records(std::string_view text) { return Parser(text).records(); }

std::vector<Record> read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read benchmark records from '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return parse_records(text.str());
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string(e.what()) + " in '" + path + "'");
  }
}

}  // namespace depengine::bench
