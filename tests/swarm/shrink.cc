#include "tests/swarm/shrink.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <vector>

namespace rdma_transport::swarm {

Scenario Shrink(const Scenario& generated,
                const std::function<bool(const Scenario&)>& fails,
                int max_runs) {
  std::vector<int> kept(generated.steps.size());
  std::iota(kept.begin(), kept.end(), 0);
  int runs = 0;
  // Tries `kept` without [begin, begin + length); keeps the cut if the run
  // still fails.
  auto try_cut = [&](size_t begin, size_t length) {
    if (runs >= max_runs) return false;
    std::vector<int> candidate;
    for (size_t i = 0; i < kept.size(); ++i) {
      if (i < begin || i >= begin + length) candidate.push_back(kept[i]);
    }
    ++runs;
    if (!fails(KeepSteps(generated, candidate))) return false;
    kept = std::move(candidate);
    return true;
  };
  for (size_t chunk = std::max<size_t>(kept.size() / 2, 1); chunk >= 1;
       chunk /= 2) {
    bool progress = true;
    while (progress && runs < max_runs) {
      progress = false;
      // From the end: late steps are the likeliest to be irrelevant.
      for (size_t begin = kept.size(); begin > 0 && runs < max_runs;) {
        const size_t start = begin >= chunk ? begin - chunk : 0;
        if (try_cut(start, begin - start)) progress = true;
        begin = std::min(start, kept.size());
      }
    }
    if (chunk == 1) break;
  }
  return KeepSteps(generated, kept);
}

}  // namespace rdma_transport::swarm
