#include "tests/swarm/scenario.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rdma_transport::swarm {
namespace {

// RoCE profiles only: an InfiniBand NIC cannot reach a RoCE one.
constexpr const char* kProfiles[] = {"cx6",  "cx7", "e810",
                                     "x722", "rxe", "erdma"};
constexpr uint32_t kMessageSizes[] = {64, 256, 1024, 4096};

struct Choice {
  StepKind kind;
  int weight;
};

Step MakeStep(Rng& rng, const Scenario& s, StepKind kind) {
  const Features& f = s.features;
  Step step;
  step.kind = kind;
  step.conn = static_cast<int>(rng.Below(static_cast<uint64_t>(s.connections)));
  step.side = static_cast<int>(rng.Below(2));
  switch (kind) {
    case StepKind::kSend:
      step.count = static_cast<uint32_t>(rng.Between(1, 12));
      step.size = rng.Percent(50)
                      ? 0
                      : static_cast<uint32_t>(rng.Between(
                            0, static_cast<int>(s.max_message_size)));
      break;
    case StepKind::kDrain:
      step.count = static_cast<uint32_t>(rng.Between(1, 16));
      break;
    case StepKind::kWrite:
    case StepKind::kRead:
      step.count = static_cast<uint32_t>(rng.Between(1, 4));
      step.size = static_cast<uint32_t>(rng.Between(1, 4096));
      break;
    case StepKind::kDrop:
      step.count = f.heavy_drops && rng.Percent(30)
                       ? static_cast<uint32_t>(rng.Between(9, 12))
                       : static_cast<uint32_t>(rng.Between(1, 3));
      break;
    case StepKind::kDelay:
      // Mostly within the ACK timeout (67 ms); sometimes beyond it, so the
      // requester retransmits and the responder sees duplicates.
      step.size = rng.Percent(20)
                      ? 100'000'000u
                      : static_cast<uint32_t>(rng.Between(1, 200) * 1000);
      break;
    case StepKind::kKillDevice:
      step.size = rng.Percent(50)
                      ? 0
                      : static_cast<uint32_t>(rng.Between(1, 3000) * 1000);
      break;
    default:
      break;
  }
  return step;
}

const char* KindName(StepKind kind) {
  switch (kind) {
    case StepKind::kSend:
      return "send";
    case StepKind::kDrain:
      return "drain";
    case StepKind::kWrite:
      return "write";
    case StepKind::kRead:
      return "read";
    case StepKind::kClose:
      return "close";
    case StepKind::kReconnect:
      return "reconnect";
    case StepKind::kDrop:
      return "drop";
    case StepKind::kDelay:
      return "delay";
    case StepKind::kQpFatal:
      return "qp_fatal";
    case StepKind::kFailCompletion:
      return "fail_completion";
    case StepKind::kCqError:
      return "cq_error";
    case StepKind::kKillDevice:
      return "kill_device";
    case StepKind::kPortDown:
      return "port_down";
    case StepKind::kPortUp:
      return "port_up";
    case StepKind::kPeerExit:
      return "peer_exit";
  }
  return "?";
}

}  // namespace

uint64_t Rng::Next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Scenario GenerateScenario(uint64_t seed) {
  Rng rng(seed);
  Scenario s;
  s.seed = seed;
  s.client_profile = kProfiles[rng.Below(std::size(kProfiles))];
  s.server_profile = rng.Percent(50)
                         ? s.client_profile
                         : kProfiles[rng.Below(std::size(kProfiles))];
  s.connections = rng.Between(1, 3);
  s.recv_slots = static_cast<uint32_t>(rng.Between(4, 16));
  s.send_slots = static_cast<uint32_t>(rng.Between(2, 16));
  s.max_message_size = kMessageSizes[rng.Below(std::size(kMessageSizes))];
  s.keepalive_ms = rng.Percent(50) ? 50 : 1000;

  Features& f = s.features;
  for (bool* feature :
       {&f.writes, &f.reads, &f.closes, &f.reconnects, &f.slow_receiver,
        &f.event_mode, &f.drops, &f.heavy_drops, &f.delays, &f.qp_errors,
        &f.cq_errors, &f.tiny_cq, &f.device_death, &f.port_flaps,
        &f.peer_exit}) {
    *feature = rng.Percent(50);
  }
  // Faults are rarer than workload, and each kind rarer still, so that most
  // seeds run some traffic before their first failure.
  std::vector<Choice> choices = {{StepKind::kSend, 12},
                                 {StepKind::kDrain, f.slow_receiver ? 3 : 10}};
  auto add = [&](bool on, StepKind kind, int weight) {
    if (on) choices.push_back({kind, weight});
  };
  add(f.writes, StepKind::kWrite, 4);
  add(f.reads, StepKind::kRead, 4);
  add(f.closes, StepKind::kClose, 1);
  add(f.reconnects, StepKind::kReconnect, 2);
  add(f.drops || f.heavy_drops, StepKind::kDrop, 2);
  add(f.delays, StepKind::kDelay, 1);
  add(f.qp_errors, StepKind::kQpFatal, 1);
  add(f.qp_errors, StepKind::kFailCompletion, 1);
  add(f.cq_errors, StepKind::kCqError, 1);
  add(f.device_death, StepKind::kKillDevice, 1);
  add(f.port_flaps, StepKind::kPortDown, 1);
  add(f.port_flaps, StepKind::kPortUp, 1);
  add(f.peer_exit, StepKind::kPeerExit, 1);
  int total = 0;
  for (const Choice& choice : choices) total += choice.weight;

  const int steps = rng.Between(6, 30);
  for (int i = 0; i < steps; ++i) {
    int pick = static_cast<int>(rng.Below(static_cast<uint64_t>(total)));
    StepKind kind = choices.back().kind;
    for (const Choice& choice : choices) {
      if (pick < choice.weight) {
        kind = choice.kind;
        break;
      }
      pick -= choice.weight;
    }
    s.steps.push_back(MakeStep(rng, s, kind));
  }
  return s;
}

Scenario KeepSteps(const Scenario& generated, const std::vector<int>& indices) {
  Scenario s = generated;
  s.steps.clear();
  s.kept.clear();
  for (int index : indices) {
    if (index < 0 || index >= static_cast<int>(generated.steps.size())) {
      continue;
    }
    s.steps.push_back(generated.steps[static_cast<size_t>(index)]);
    s.kept.push_back(index);
  }
  // Keeping every step is the generated scenario itself.
  s.is_shrunk = s.kept.size() != generated.steps.size();
  if (!s.is_shrunk) s.kept.clear();
  return s;
}

std::string DescribeStep(const Step& step) {
  std::string text =
      absl::StrCat(KindName(step.kind), " conn=", step.conn,
                   " side=", step.side == 0 ? "client" : "server");
  switch (step.kind) {
    case StepKind::kSend:
      absl::StrAppend(
          &text, " count=", step.count, " size=",
          step.size == 0 ? std::string("random") : absl::StrCat(step.size));
      break;
    case StepKind::kDrain:
    case StepKind::kDrop:
      absl::StrAppend(&text, " count=", step.count);
      break;
    case StepKind::kWrite:
    case StepKind::kRead:
      absl::StrAppend(&text, " ops=", step.count, " size=", step.size);
      break;
    case StepKind::kDelay:
      absl::StrAppend(&text, " delay=", step.size / 1000, "us");
      break;
    case StepKind::kKillDevice:
      absl::StrAppend(&text, " in=", step.size / 1000, "us");
      break;
    default:
      break;
  }
  return text;
}

std::string DescribeFeatures(const Features& f) {
  std::vector<std::string> parts;
  auto add = [&](bool on, const char* name) {
    parts.push_back(absl::StrCat(on ? "+" : "-", name));
  };
  add(f.writes, "writes");
  add(f.reads, "reads");
  add(f.closes, "closes");
  add(f.reconnects, "reconnects");
  add(f.slow_receiver, "slow_receiver");
  add(f.event_mode, "event_mode");
  add(f.drops, "drops");
  add(f.heavy_drops, "heavy_drops");
  add(f.delays, "delays");
  add(f.qp_errors, "qp_errors");
  add(f.cq_errors, "cq_errors");
  add(f.tiny_cq, "tiny_cq");
  add(f.device_death, "device_death");
  add(f.port_flaps, "port_flaps");
  add(f.peer_exit, "peer_exit");
  return absl::StrJoin(parts, " ");
}

std::string DescribeScenario(const Scenario& s) {
  std::string text = absl::StrCat(
      "seed ", s.seed, ": client ", s.client_profile, ", server ",
      s.server_profile, ", ", s.connections, " connection(s), recv_slots ",
      s.recv_slots, ", send_slots ", s.send_slots, ", max_message_size ",
      s.max_message_size, ", keepalive ", s.keepalive_ms,
      " ms\n  features: ", DescribeFeatures(s.features), "\n");
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const int index = s.shrunk() ? s.kept[i] : static_cast<int>(i);
    absl::StrAppend(&text, "  [", index, "] ", DescribeStep(s.steps[i]), "\n");
  }
  return text;
}

std::string ReplayCommand(const Scenario& s) {
  std::string command =
      absl::StrCat("bazel run //tests/swarm:swarm -- --seed=", s.seed);
  if (s.shrunk()) {
    absl::StrAppend(&command, " --steps=",
                    s.kept.empty() ? "none" : absl::StrJoin(s.kept, ","));
  }
  absl::StrAppend(&command, " --verbose");
  return command;
}

}  // namespace rdma_transport::swarm
