// Test support: `says({"part", ...})`, a Catch2 matcher for CHECK_THROWS_MATCHES that accepts an exception
// whose what() contains every one of the parts (the documented-error tests check a distinctive piece of
// each message, not its exact wording).
#pragma once

#include <algorithm>
#include <exception>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

namespace test_support {

/// Matches an exception whose what() contains every one of `parts`.
class message_contains : public Catch::MatcherBase<std::exception> {
 public:
  explicit message_contains(std::vector<std::string> parts) : parts_(std::move(parts)) {}
  bool match(const std::exception& e) const override {
    const std::string what = e.what();
    return std::all_of(parts_.begin(), parts_.end(),
                       [&](const std::string& p) { return what.find(p) != std::string::npos; });
  }
  std::string describe() const override {
    std::string s = "has a message containing";
    for (const auto& p : parts_) s += " \"" + p + "\"";
    return s;
  }

 private:
  std::vector<std::string> parts_;
};

/// `message_contains` of `parts`.
inline message_contains says(std::initializer_list<std::string> parts) {
  return message_contains(std::vector<std::string>(parts));
}

}  // namespace test_support
