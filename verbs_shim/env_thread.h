// File: verbs_shim/env_thread.h
//
// `RunInThread` starts a function on a new thread that takes part in an Env
// (verbs_shim/env.h), and `EnvFuture` waits for its result through that
// Env. On the real clock this is std::async; on a simulated fabric's virtual
// clock the thread is counted as a participant, so virtual time waits for it
// too, and a thread waiting in Get() counts as blocked, so time still moves
// while it waits. Use it, not std::async, wherever threads share a
// simulated fabric.
//
//   EnvFuture<absl::Status> server =
//       RunInThread(env, [&] { return ServeOne(*listener); });
//   absl::Status client = RunClient();
//   absl::Status served = server.Get();
//
// Thread-safety: Get() from one thread; the future is move-only and its
// destructor waits for the thread (as a std::async future's does).

#ifndef RDMA_TRANSPORT_VERBS_SHIM_ENV_THREAD_H_
#define RDMA_TRANSPORT_VERBS_SHIM_ENV_THREAD_H_

#include <atomic>
#include <memory>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

#include "verbs_shim/env.h"

namespace rdma_transport {

template <typename T>
class EnvFuture {
 public:
  EnvFuture(EnvFuture&&) noexcept = default;
  EnvFuture& operator=(EnvFuture&&) noexcept = default;
  ~EnvFuture() {
    if (state_ != nullptr) WaitForThread();
  }

  // Waits (through the Env) for the function's result.
  T Get() {
    WaitForThread();
    T value = std::move(*state_->value);
    state_.reset();
    return value;
  }

 private:
  template <typename F>
  friend auto RunInThread(Env& env, F function)
      -> EnvFuture<std::invoke_result_t<F>>;

  struct State {
    explicit State(Env& e) : env(e) {}
    Env& env;
    std::atomic<bool> done{false};
    std::optional<T> value;
    std::thread thread;
  };

  explicit EnvFuture(std::unique_ptr<State> state) : state_(std::move(state)) {}

  void WaitForThread() {
    Env& env = state_->env;
    while (!state_->done.load(std::memory_order_acquire)) {
      const uint64_t token = env.PrepareWait();
      if (state_->done.load(std::memory_order_acquire)) break;
      env.Wait(token, {},
               env.virtual_time() ? kNoDeadline : env.DeadlineIn(kPollEvery),
               WaitKind::kBlock);
    }
    if (state_->thread.joinable()) state_->thread.join();
  }

  static constexpr std::chrono::milliseconds kPollEvery{1};
  std::unique_ptr<State> state_;
};

template <typename F>
auto RunInThread(Env& env, F function) -> EnvFuture<std::invoke_result_t<F>> {
  using T = std::invoke_result_t<F>;
  auto state = std::make_unique<typename EnvFuture<T>::State>(env);
  typename EnvFuture<T>::State* raw = state.get();
  env.AddParticipant();
  raw->thread = std::thread([raw, function = std::move(function)]() mutable {
    raw->env.JoinAsParticipant();
    raw->value.emplace(function());
    raw->done.store(true, std::memory_order_release);
    raw->env.RemoveParticipant();  // also wakes the waiters
  });
  return EnvFuture<T>(std::move(state));
}

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_VERBS_SHIM_ENV_THREAD_H_
