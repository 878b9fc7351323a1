// A stand-in for libFuzzer's driver in builds without the fuzzing engine
// (g++, or clang without -fsanitize=fuzzer): runs LLVMFuzzerTestOneInput once
// over every regular file of the directories (or files) named on the command
// line, in sorted order, and prints how many inputs ran. A crash, a
// sanitizer report or an uncaught exception fails the process, so ctest
// replays the checked-in corpus in seconds (the same contract as libFuzzer's
// own `-runs=0` replay, llvm.org/docs/LibFuzzer.html "Options").

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    fs::path p{argv[i]};
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      for (const auto& e : fs::recursive_directory_iterator(p, ec))
        if (e.is_regular_file())
          files.push_back(e.path());
    } else if (fs::is_regular_file(p, ec)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "replay: %s: no such file or directory\n", argv[i]);
      return 2;
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "replay: no inputs\n");
    return 2;
  }
  for (const auto& f : files) {
    std::ifstream in{f, std::ios::binary};
    std::string bytes{std::istreambuf_iterator<char>{in},
                      std::istreambuf_iterator<char>{}};
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()),
                           bytes.size());
  }
  std::printf("replay: %zu inputs ran\n", files.size());
  return 0;
}
