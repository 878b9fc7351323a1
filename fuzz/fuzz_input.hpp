#pragma once

// Splits one fuzz input into the pieces a harness needs (a few flag bytes,
// then strings). A tiny, compiler-independent subset of LLVM's
// FuzzedDataProvider, which only clang ships: the harnesses must also build
// with g++ for the corpus replay.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace outbound::fuzz {

class input {
public:
  input(const uint8_t* data, std::size_t size)
    : p_(reinterpret_cast<const char*>(data)), n_(size) {
  }

  /// The next byte, 0 once the input is used up.
  uint8_t byte() {
    if (n_ == 0)
      return 0;
    auto b = static_cast<uint8_t>(*p_);
    ++p_;
    --n_;
    return b;
  }

  /// Bytes up to the next `sep` (consumed, not returned), or all the rest.
  std::string_view until(char sep) {
    std::string_view rest{p_, n_};
    auto i = rest.find(sep);
    if (i == std::string_view::npos) {
      p_ += n_;
      n_ = 0;
      return rest;
    }
    p_ += i + 1;
    n_ -= i + 1;
    return rest.substr(0, i);
  }

  /// Everything left.
  std::string_view rest() {
    std::string_view r{p_, n_};
    p_ += n_;
    n_ = 0;
    return r;
  }

  bool empty() const {
    return n_ == 0;
  }

private:
  const char* p_;
  std::size_t n_;
};

} // namespace outbound::fuzz
