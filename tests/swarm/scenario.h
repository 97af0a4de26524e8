// File: tests/swarm/scenario.h
//
// A swarm scenario (Groce et al., "Swarm testing", ISSTA 2012): everything a
// run of the transport on the simulator does, generated from one 64-bit
// seed. The seed picks the two NICs' profiles, the connections' shape, a
// random subset of features switched off (no drops, no reads, no closes...),
// then a list of steps, workload and faults interleaved, drawn only from the
// features left on. Leaving whole features out is what makes some seeds
// reach deep states (many messages queued against a slow receiver, say) that
// a generator always mixing everything would dilute away.
//
//   Scenario scenario = GenerateScenario(42);
//   std::string text = DescribeScenario(scenario);  // one step a line
//   Scenario smaller = KeepSteps(scenario, {0, 3, 4});  // for shrinking
//
// A scenario is plain data: the runner (runner.h) interprets it. Generation
// uses only SplitMix64 and integer arithmetic, so a seed means the same
// scenario on every compiler and standard library.
//
// Thread-safety: plain values; GenerateScenario is a pure function.

#ifndef RDMA_TRANSPORT_TESTS_SWARM_SCENARIO_H_
#define RDMA_TRANSPORT_TESTS_SWARM_SCENARIO_H_

#include <cstdint>
#include <string>
#include <vector>

namespace rdma_transport::swarm {

// SplitMix64: the seed's stream of choices.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  // Uniform in [0, n); n > 0 (the modulo bias is irrelevant here).
  uint64_t Below(uint64_t n) { return Next() % n; }
  // Uniform in [lo, hi].
  int Between(int lo, int hi) {
    return lo + static_cast<int>(Below(static_cast<uint64_t>(hi - lo + 1)));
  }
  // True with probability percent / 100.
  bool Percent(int percent) {
    return Below(100) < static_cast<uint64_t>(percent);
  }

 private:
  uint64_t state_;
};

// The features a seed may switch off (swarm testing). Each is on with
// probability 1/2, independently.
struct Features {
  // Workload.
  bool writes = false;         // one-sided RDMA WRITE batches
  bool reads = false;          // one-sided RDMA READ batches
  bool closes = false;         // graceful Close() mid-scenario
  bool reconnects = false;     // a new connection replaces a closed/failed one
  bool slow_receiver = false;  // receivers drain rarely: senders run out of
                               // credits and their Send deadlines expire
  bool event_mode = false;     // ProgressMode::kEvent instead of kBusyPoll
  // Faults.
  bool drops = false;         // packets lost (a few: retransmitted)
  bool heavy_drops = false;   // more lost than the retry budget covers
  bool delays = false;        // packets arrive late
  bool qp_errors = false;     // IBV_EVENT_QP_FATAL, failed completions
  bool cq_errors = false;     // IBV_EVENT_CQ_ERR on a connection's CQ
  bool tiny_cq = false;       // every CQ created far too small: a real overrun
  bool device_death = false;  // KillDevice, now or scheduled
  bool port_flaps = false;    // PortDown, later PortUp
  bool peer_exit = false;     // one side's process "exits"
};

enum class StepKind {
  // Workload. `side` 0: the client sends / writes / reads / closes; 1: the
  // server does.
  kSend,       // `count` messages of `size` bytes (0: random sizes)
  kDrain,      // the other side receives up to `count` messages
  kWrite,      // `count` ops of `size` bytes in one Write()
  kRead,       // `count` ops of `size` bytes in one Read()
  kClose,      // `side` closes the connection
  kReconnect,  // if connection `conn` has ended, dial a new one in its place
  // Faults, aimed at connection `conn`'s `side` QP or device.
  kDrop,            // the next `count` packets to the QP are lost
  kDelay,           // every packet to the QP arrives `size` ns late
  kQpFatal,         // IBV_EVENT_QP_FATAL on the QP
  kFailCompletion,  // the QP's next send WR completes in error
  kCqError,         // IBV_EVENT_CQ_ERR on the QP's CQ
  kKillDevice,      // the side's NIC dies `size` ns from now (0: now)
  kPortDown,        // the side's port goes down (PortUp comes with kPortUp)
  kPortUp,
  kPeerExit,  // the side's process exits (setup stream EOF, no goodbye)
};

struct Step {
  StepKind kind = StepKind::kSend;
  int conn = 0;
  int side = 0;
  uint32_t count = 1;
  uint32_t size = 0;
};

struct Scenario {
  uint64_t seed = 0;
  // sim/profile_names.h names of the client's and the server's NIC.
  std::string client_profile = "cx7";
  std::string server_profile = "cx7";
  int connections = 1;  // opened before the first step
  uint32_t recv_slots = 8;
  uint32_t send_slots = 8;
  uint32_t max_message_size = 256;
  uint32_t keepalive_ms = 1000;
  Features features;
  std::vector<Step> steps;
  // Indices of `steps` in the generated scenario (for the replay command of
  // a shrunk one); empty: all of them, as generated.
  std::vector<int> kept;
  bool is_shrunk = false;
  bool shrunk() const { return is_shrunk; }
};

// The scenario of `seed`.
Scenario GenerateScenario(uint64_t seed);
// The generated scenario of `seed` with only the steps at `indices` (of the
// generated list, in order), as a shrinker produces and a replay rebuilds.
Scenario KeepSteps(const Scenario& generated, const std::vector<int>& indices);

// A readable description: the shape, the features off, one step a line.
std::string DescribeScenario(const Scenario& scenario);
std::string DescribeStep(const Step& step);
// "+writes -reads ...": each feature and whether it is on.
std::string DescribeFeatures(const Features& features);

// The command that replays `scenario` (its seed and, shrunk, its steps).
std::string ReplayCommand(const Scenario& scenario);

}  // namespace rdma_transport::swarm

#endif  // RDMA_TRANSPORT_TESTS_SWARM_SCENARIO_H_
