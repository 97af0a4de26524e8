// A main() for running a libFuzzer target's LLVMFuzzerTestOneInput over a
// seed corpus without libFuzzer, so `bazel test` (gcc, any --config) runs
// every seed. Arguments are corpus directories or files, relative to the
// runfiles root under `bazel test`; a missing or empty corpus fails.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

fs::path Resolve(const std::string& argument) {
  fs::path path(argument);
  if (fs::exists(path)) return path;
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir != nullptr && workspace != nullptr) {
    return fs::path(srcdir) / workspace / argument;
  }
  return path;
}

bool RunOne(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return false;
  }
  // A heap copy of exactly the file's bytes, so ASan catches any read past
  // the input as libFuzzer would.
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(file)),
                             std::istreambuf_iterator<char>());
  std::fprintf(stderr, "running %s (%zu bytes)\n", path.c_str(), bytes.size());
  LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  size_t inputs = 0;
  for (int i = 1; i < argc; ++i) {
    const fs::path path = Resolve(argv[i]);
    std::error_code error;
    if (fs::is_directory(path, error)) {
      std::vector<fs::path> files;
      for (const fs::directory_entry& entry : fs::directory_iterator(path)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());
      for (const fs::path& file : files) {
        if (!RunOne(file)) return 1;
        ++inputs;
      }
    } else if (fs::is_regular_file(path, error)) {
      if (!RunOne(path)) return 1;
      ++inputs;
    } else {
      std::fprintf(stderr, "no corpus at %s\n", path.c_str());
      return 1;
    }
  }
  if (inputs == 0) {
    std::fprintf(stderr, "the corpus is empty\n");
    return 1;
  }
  std::fprintf(stderr, "%zu inputs ran cleanly\n", inputs);
  return 0;
}
