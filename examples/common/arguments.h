// The examples' command lines: options with values ("--epochs 30") and flags ("--check"), read in order, with an
// exception that says what was wrong for a missing value, a value that is not a positive integer, or an unknown
// option.
//
//   depengine::examples::Arguments args(argc, argv, "[--epochs N] [--check]");
//   while (args.next()) {
//     if (args.is("--epochs")) epochs = args.positive();
//     else if (args.is("--check")) check = true;
//     else args.unknown();
//   }
#pragma once

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace depengine::examples {

class Arguments {
 public:
  // `usage` lists the options ("[--epochs N] [--check]"), for --help and the message of unknown().
  Arguments(int argc, char** argv, std::string usage) : argc_(argc), argv_(argv), usage_(std::move(usage)) {}

  // Moves to the next option; false once there is none. --help (or -h) prints "usage: PROGRAM USAGE" and exits with
  // status 0.
  [[nodiscard]] bool next() {
    if (++at_ >= argc_) return false;
    option_ = argv_[at_];
    if (option_ == "--help" || option_ == "-h") {
      const std::string_view program = argv_[0];
      std::printf("usage: %s %s\n", std::string(program.substr(program.find_last_of('/') + 1)).c_str(), usage_.c_str());
      std::exit(0);
    }
    return true;
  }
  [[nodiscard]] bool is(std::string_view option) const { return option_ == option; }

  // The option's value (the next argument). Throws std::invalid_argument if there is none.
  [[nodiscard]] std::string value() {
    if (at_ + 1 >= argc_) throw std::invalid_argument(std::string(option_) + " needs a value");
    return argv_[++at_];
  }
  // The option's value as an integer of at least 1. Throws std::invalid_argument otherwise.
  [[nodiscard]] int positive() {
    const std::string text = value();
    std::size_t used = 0;
    int n = 0;
    try {
      n = std::stoi(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != text.size() || n < 1) {
      throw std::invalid_argument(std::string(option_) + " needs a positive integer, not '" + text + "'");
    }
    return n;
  }
  // Throws std::invalid_argument naming the option and listing the known ones.
  [[noreturn]] void unknown() const {
    throw std::invalid_argument("unknown option '" + std::string(option_) + "' (" + usage_ + ")");
  }

 private:
  int argc_;
  char** argv_;
  std::string usage_;
  int at_ = 0;
  std::string_view option_;
};

}  // namespace depengine::examples
