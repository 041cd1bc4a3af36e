// The error a communication op raises on every rank when some rank's input carried an error (distributed/).
#pragma once

#include <stdexcept>
#include <string>

namespace depengine {

// What WaitForVar rethrows, on every rank, for the outputs of a collective (or a received message) whose input carried
// an error on rank rank(): "rank 1: loss is NaN". When several ranks failed, every rank names the lowest of them. An
// error that already came from another rank keeps naming that rank as it flows on through later communication.
class RemoteError : public std::runtime_error {
 public:
  // The error of rank `rank`, whose own error's text was `message`.
  RemoteError(int rank, std::string message)
      : std::runtime_error("rank " + std::to_string(rank) + ": " + message),
        rank_(rank),
        message_(std::move(message)) {}

  // The rank whose input carried the error, and that error's own what().
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] const std::string& message() const noexcept { return message_; }

 private:
  int rank_;
  std::string message_;
};

}  // namespace depengine
