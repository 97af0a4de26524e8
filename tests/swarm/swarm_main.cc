// The swarm test's command line: run a range of seeds, soak for a while, or
// replay one seed (optionally only some of its steps, as a shrink printed).
//
//   bazel run -c opt //tests/swarm:swarm -- --seeds=10000
//   bazel run -c opt //tests/swarm:swarm -- --soak_seconds=3600
//   bazel run //tests/swarm:swarm -- --seed=123 --verbose
//   bazel run //tests/swarm:swarm -- --seed=123 --steps=2,5,9 --verbose
//
// Exit status 0 when every seed passed, 1 otherwise (each failing seed's
// report on stderr).

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "tests/swarm/driver.h"
#include "tests/swarm/runner.h"
#include "tests/swarm/scenario.h"

ABSL_FLAG(uint64_t, seed, 0, "Replay this one seed (0: run a range).");
ABSL_FLAG(std::string, steps, "",
          "With --seed: only these step indices (comma separated; none: no "
          "step), as a shrunk scenario's replay command gives them.");
ABSL_FLAG(uint64_t, first_seed, 1, "The first seed of the range.");
ABSL_FLAG(uint64_t, seeds, 1000, "How many seeds to run.");
ABSL_FLAG(int64_t, soak_seconds, 0,
          "> 0: run seeds from --first_seed on for this long instead.");
ABSL_FLAG(bool, verbose, false,
          "With --seed: print the scenario and each step's outcome.");
ABSL_FLAG(bool, shrink, true, "Shrink failing seeds before reporting them.");
ABSL_FLAG(int32_t, max_failures, 1, "Stop after this many failing seeds.");
ABSL_FLAG(bool, check_credit_stalls, false,
          "Also fail a Send that stalls though its peer received everything "
          "(finds an open credit bug, docs/testing.md).");
ABSL_FLAG(bool, digests, false, "Print each seed's trace digest.");

namespace rdma_transport::swarm {
namespace {

int ReplayOne(uint64_t seed) {
  const Scenario generated = GenerateScenario(seed);
  Scenario scenario = generated;
  const std::string steps = absl::GetFlag(FLAGS_steps);
  if (!steps.empty()) {
    std::vector<int> indices;
    for (absl::string_view part : absl::StrSplit(steps, ',')) {
      if (part == "none") continue;  // a scenario shrunk to no steps
      int index = 0;
      if (!absl::SimpleAtoi(part, &index)) {
        std::fprintf(stderr, "--steps: not a step index: %s\n",
                     std::string(part).c_str());
        return 2;
      }
      indices.push_back(index);
    }
    scenario = KeepSteps(generated, indices);
  }
  const bool verbose = absl::GetFlag(FLAGS_verbose);
  if (verbose) std::printf("%s", DescribeScenario(scenario).c_str());
  RunOptions options;
  options.verbose = verbose;
  options.echo = verbose;
  options.check_credit_stalls = absl::GetFlag(FLAGS_check_credit_stalls);
  const RunResult result = RunScenario(scenario, options);
  std::printf(
      "seed %llu: digest %016llx, %llu events, %.6f s virtual, %llu "
      "messages delivered, %llu one-sided batches, %llu connections dialled: "
      "%s\n",
      static_cast<unsigned long long>(seed),
      static_cast<unsigned long long>(result.digest),
      static_cast<unsigned long long>(result.events),
      std::chrono::duration<double>(result.virtual_time).count(),
      static_cast<unsigned long long>(result.messages_delivered),
      static_cast<unsigned long long>(result.rdma_ops_ok),
      static_cast<unsigned long long>(result.connections_dialled),
      result.ok() ? "ok" : "FAILED");
  for (const std::string& violation : result.violations) {
    std::printf("  violated: %s\n", violation.c_str());
  }
  if (!result.ok() && steps.empty() && absl::GetFlag(FLAGS_shrink)) {
    std::printf(
        "%s", FailureReport(seed, /*shrink=*/true, options.check_credit_stalls)
                  .c_str());
  }
  return result.ok() ? 0 : 1;
}

}  // namespace
}  // namespace rdma_transport::swarm

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Seeded swarm test of the transport on the simulator "
      "(docs/testing.md).");
  absl::ParseCommandLine(argc, argv);
  using namespace rdma_transport::swarm;
  if (absl::GetFlag(FLAGS_seed) != 0) {
    return ReplayOne(absl::GetFlag(FLAGS_seed));
  }
  SwarmOptions options;
  options.first_seed = absl::GetFlag(FLAGS_first_seed);
  options.seeds = absl::GetFlag(FLAGS_seeds);
  options.soak = std::chrono::seconds(absl::GetFlag(FLAGS_soak_seconds));
  options.shrink = absl::GetFlag(FLAGS_shrink);
  options.max_failures = absl::GetFlag(FLAGS_max_failures);
  options.print_digests = absl::GetFlag(FLAGS_digests);
  options.check_credit_stalls = absl::GetFlag(FLAGS_check_credit_stalls);
  const SwarmSummary summary = RunSeeds(options);
  for (const SeedFailure& failure : summary.failures) {
    std::fprintf(stderr, "%s\n", failure.report.c_str());
  }
  std::printf("swarm: %s\n", summary.ToString().c_str());
  return summary.failures.empty() ? 0 : 1;
}
