#include "tests/swarm/driver.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/swarm/runner.h"
#include "tests/swarm/scenario.h"
#include "tests/swarm/shrink.h"

namespace rdma_transport::swarm {
namespace {

std::atomic<uint64_t> seed_in_progress{0};
std::atomic<bool> handler_installed{false};

// Appends `text` to line[length...] (no allocation: signal context).
void Append(char* line, size_t size, size_t& length, const char* text) {
  while (*text != '\0' && length + 1 < size) line[length++] = *text++;
}

void AppendNumber(char* line, size_t size, size_t& length, uint64_t value) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0 && n < 24);
  while (n > 0 && length + 1 < size) line[length++] = digits[--n];
}

// Async-signal-safe: formats by hand and write(2)s the replay command.
void OnFatalSignal(int signal_number) {
  char line[192];
  size_t length = 0;
  const uint64_t seed = seed_in_progress.load();
  Append(line, sizeof(line), length, "\nswarm: seed ");
  AppendNumber(line, sizeof(line), length, seed);
  Append(line, sizeof(line), length,
         " crashed; replay: bazel run //tests/swarm:swarm -- --seed=");
  AppendNumber(line, sizeof(line), length, seed);
  Append(line, sizeof(line), length, " --verbose\n");
  (void)!write(STDERR_FILENO, line, length);
  ::signal(signal_number, SIG_DFL);
  ::raise(signal_number);
}

// A seed that takes this long in real time is hung (a livelock in virtual
// time, a wait that never ends): the watchdog names it and aborts.
constexpr std::chrono::seconds kHangAfter{20};
std::atomic<uint64_t> seeds_started{0};

void StartHangWatchdog() {
  static std::atomic<bool> started{false};
  if (started.exchange(true)) return;
  std::thread([] {
    uint64_t last = ~uint64_t{0};
    auto since = std::chrono::steady_clock::now();
    while (true) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      const uint64_t now_started = seeds_started.load();
      if (now_started != last) {
        last = now_started;
        since = std::chrono::steady_clock::now();
      } else if (std::chrono::steady_clock::now() - since > kHangAfter) {
        std::fprintf(stderr, "\nswarm: seed %llu hung (no progress for %lld s)",
                     static_cast<unsigned long long>(seed_in_progress.load()),
                     static_cast<long long>(kHangAfter.count()));
        std::abort();  // the crash handler prints the replay command
      }
    }
  }).detach();
}

void InstallCrashHandler() {
  if (handler_installed.exchange(true)) return;
  for (int signal_number : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) {
    ::signal(signal_number, OnFatalSignal);
  }
}

}  // namespace

std::string FailureReport(uint64_t seed, bool shrink,
                          bool check_credit_stalls) {
  RunOptions options;
  options.check_credit_stalls = check_credit_stalls;
  const Scenario scenario = GenerateScenario(seed);
  const RunResult result = RunScenario(scenario, options);
  std::string report = absl::StrCat("swarm: seed ", seed, " FAILED (digest ",
                                    absl::Hex(result.digest, absl::kZeroPad16),
                                    ")\n", DescribeScenario(scenario));
  for (const std::string& violation : result.violations) {
    absl::StrAppend(&report, "  violated: ", violation, "\n");
  }
  if (shrink && !result.ok()) {
    const Scenario minimal =
        Shrink(scenario, [&options](const Scenario& candidate) {
          return !RunScenario(candidate, options).ok();
        });
    const RunResult again = RunScenario(minimal, options);
    absl::StrAppend(&report, "shrunk to ", minimal.steps.size(), " of ",
                    scenario.steps.size(), " steps:\n",
                    DescribeScenario(minimal));
    for (const std::string& violation : again.violations) {
      absl::StrAppend(&report, "  violated: ", violation, "\n");
    }
    absl::StrAppend(
        &report, "replay the shrunk scenario: ", ReplayCommand(minimal), "\n");
  }
  absl::StrAppend(&report, "replay: ", ReplayCommand(scenario), "\n");
  return report;
}

SwarmSummary RunSeeds(const SwarmOptions& options) {
  InstallCrashHandler();
  StartHangWatchdog();
  SwarmSummary summary;
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 0;; ++i) {
    const auto elapsed = std::chrono::steady_clock::now() - start;
    if (options.soak.count() > 0 ? elapsed >= options.soak
                                 : i >= options.seeds) {
      break;
    }
    const uint64_t seed = options.first_seed + i;
    seed_in_progress.store(seed);
    seeds_started.fetch_add(1);
    RunOptions run_options;
    run_options.check_credit_stalls = options.check_credit_stalls;
    const RunResult result = RunScenario(GenerateScenario(seed), run_options);
    ++summary.seeds_run;
    summary.messages_delivered += result.messages_delivered;
    summary.rdma_ops_ok += result.rdma_ops_ok;
    summary.connections_dialled += result.connections_dialled;
    summary.connections_failed += result.connections_failed;
    summary.events += result.events;
    if (options.print_digests) {
      std::printf("seed %llu digest %016llx %s\n",
                  static_cast<unsigned long long>(seed),
                  static_cast<unsigned long long>(result.digest),
                  result.ok() ? "ok" : "FAILED");
    }
    if (!result.ok()) {
      summary.failures.push_back(
          {seed,
           FailureReport(seed, options.shrink, options.check_credit_stalls)});
      if (static_cast<int>(summary.failures.size()) >= options.max_failures) {
        break;
      }
    }
  }
  summary.wall = std::chrono::steady_clock::now() - start;
  return summary;
}

std::string SwarmSummary::ToString() const {
  const double seconds = std::chrono::duration<double>(wall).count();
  return absl::StrCat(
      seeds_run, " seeds in ", absl::SixDigits(seconds), " s (",
      absl::SixDigits(seconds > 0 ? seeds_run / seconds : 0), " seeds/s), ",
      failures.size(), " failing; ", messages_delivered,
      " messages delivered, ", rdma_ops_ok, " one-sided batches checked, ",
      connections_dialled, " connections dialled, ", connections_failed,
      " sides ended with a typed Status, ", events, " fabric events");
}

}  // namespace rdma_transport::swarm
