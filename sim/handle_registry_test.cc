// HandleRegistry (sim/internal/handle_registry.h) and the FlatIndex under it
// (flat_index.h). The registry finds what it owns by
// handle, forgets what is erased (destroyed handles are not found, and never
// dereferenced), keeps every other entry findable across growth and the
// backward shifts of deletion.
#include "sim/internal/handle_registry.h"

#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace rdma_transport::sim::internal {
namespace {

struct Handle {
  int unused = 0;
};
struct Object {
  Handle handle;
  int value = 0;
};

TEST(HandleRegistryTest, FindsWhatItOwnsAndNothingElse) {
  HandleRegistry<Handle, Object> registry;
  auto object = std::make_unique<Object>();
  object->value = 7;
  const Handle* handle = &object->handle;
  Object* raw = object.get();
  registry.emplace(handle, std::move(object));
  EXPECT_EQ(registry.Find(handle), raw);
  EXPECT_EQ(registry.size(), 1u);
  Handle stranger;
  EXPECT_EQ(registry.Find(&stranger), nullptr);
  EXPECT_EQ(registry.Find(nullptr), nullptr);
  registry.erase(handle);
  EXPECT_EQ(registry.Find(handle), nullptr);  // Compared, not dereferenced.
  EXPECT_TRUE(registry.empty());
  registry.erase(&stranger);  // Unknown: nothing happens.
}

// Adjacent addresses hash to clustered slots; random erasure exercises the
// backward shift in every position of a probe run.
TEST(HandleRegistryTest, RandomInsertsAndErasesKeepEveryEntryFindable) {
  HandleRegistry<Handle, Object> registry;
  std::vector<Object*> live;
  std::vector<const Handle*> gone;
  std::mt19937 random(12345);
  for (int step = 0; step < 20000; ++step) {
    if (live.empty() || random() % 3 != 0) {
      auto object = std::make_unique<Object>();
      object->value = step;
      live.push_back(object.get());
      const Handle* handle = &object->handle;
      registry.emplace(handle, std::move(object));
    } else {
      const size_t victim = random() % live.size();
      const Handle* handle = &live[victim]->handle;
      registry.erase(handle);
      live[victim] = live.back();
      live.pop_back();
      gone.push_back(handle);
    }
    if (step % 997 == 0) {
      for (Object* object : live) {
        ASSERT_EQ(registry.Find(&object->handle), object) << step;
      }
    }
  }
  ASSERT_EQ(registry.size(), live.size());
  std::set<const Handle*> live_handles;
  for (Object* object : live) {
    ASSERT_EQ(registry.Find(&object->handle), object);
    live_handles.insert(&object->handle);
  }
  // A freed address may have been reused by a later object; the others
  // are unknown.
  for (const Handle* handle : gone) {
    if (live_handles.count(handle) == 0) {
      ASSERT_EQ(registry.Find(handle), nullptr);
    }
  }
  size_t iterated = 0;
  for (const auto& [handle, object] : registry) {
    EXPECT_EQ(handle, &object->handle);
    ++iterated;
  }
  EXPECT_EQ(iterated, live.size());
}

// Integer keys (MR lkeys): handed out in sequence, so their homes are
// spread by the hash, not by the keys' own bits.
TEST(FlatIndexTest, SequentialIntegerKeysComeAndGo) {
  FlatIndex<uint32_t, int*> index;
  std::vector<int> values(5000);
  for (uint32_t i = 0; i < values.size(); ++i) {
    index.Insert(0x1000 + i, &values[i]);
  }
  for (uint32_t i = 0; i < values.size(); i += 2) {
    ASSERT_TRUE(index.Erase(0x1000 + i));
  }
  EXPECT_FALSE(index.Erase(0x1000));  // Already gone.
  EXPECT_FALSE(index.Erase(7));       // Never there.
  EXPECT_EQ(index.size(), values.size() / 2);
  for (uint32_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(index.Find(0x1000 + i), i % 2 == 0 ? nullptr : &values[i]) << i;
  }
  EXPECT_EQ(index.Find(0), nullptr);
}

}  // namespace
}  // namespace rdma_transport::sim::internal
