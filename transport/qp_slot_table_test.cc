// QpSlotTable: inserts, finds and erases against a reference map, with QP
// numbers both consecutive (the simulator's) and scattered, full tables and
// erasures in every order (the backward shift keeps the rest findable).

#include "transport/qp_slot_table.h"

#include <cstdint>
#include <iterator>
#include <map>
#include <vector>

#include "gtest/gtest.h"

namespace rdma_transport {
namespace {

void ExpectMatches(const QpSlotTable& table,
                   const std::map<uint32_t, uint32_t>& reference,
                   const std::vector<uint32_t>& all) {
  for (uint32_t qp_num : all) {
    auto it = reference.find(qp_num);
    EXPECT_EQ(table.Find(qp_num),
              it == reference.end() ? QpSlotTable::kNone : it->second)
        << "qp_num " << qp_num;
  }
}

TEST(QpSlotTableTest, EmptyFindsNothing) {
  QpSlotTable table(4);
  EXPECT_EQ(table.Find(0), QpSlotTable::kNone);
  EXPECT_EQ(table.Find(0x100), QpSlotTable::kNone);
  table.Erase(0);  // nothing to erase
  EXPECT_EQ(table.Find(0), QpSlotTable::kNone);
}

TEST(QpSlotTableTest, QpNumberZeroIsAKey) {
  QpSlotTable table(2);
  table.Insert(0, 7);
  EXPECT_EQ(table.Find(0), 7u);
  table.Erase(0);
  EXPECT_EQ(table.Find(0), QpSlotTable::kNone);
}

TEST(QpSlotTableTest, FullTableOfConsecutiveAndScatteredNumbers) {
  for (uint32_t stride : {1u, 7u, 0x10001u, 0x9e3779b1u}) {
    constexpr uint32_t kCapacity = 1000;
    QpSlotTable table(kCapacity);
    std::map<uint32_t, uint32_t> reference;
    std::vector<uint32_t> all;
    for (uint32_t i = 0; i < kCapacity; ++i) {
      const uint32_t qp_num = 0x100 + i * stride;
      table.Insert(qp_num, i);
      reference[qp_num] = i;
      all.push_back(qp_num);
    }
    all.push_back(0x100 + kCapacity * stride);  // never inserted
    ExpectMatches(table, reference, all);
    // Erase every third, then the rest in reverse: each erasure leaves the
    // others findable.
    for (uint32_t i = 0; i < kCapacity; i += 3) {
      table.Erase(all[i]);
      reference.erase(all[i]);
    }
    ExpectMatches(table, reference, all);
    for (uint32_t i = kCapacity; i-- > 0;) {
      table.Erase(all[i]);
      reference.erase(all[i]);
      if (i % 97 == 0) ExpectMatches(table, reference, all);
    }
    ExpectMatches(table, reference, all);
  }
}

TEST(QpSlotTableTest, ChurnKeepsEveryLiveEntry) {
  // Attach and detach as an engine does, with numbers never reused.
  constexpr uint32_t kCapacity = 64;
  QpSlotTable table(kCapacity);
  std::map<uint32_t, uint32_t> reference;
  std::vector<uint32_t> all;
  uint32_t next_qp = 0x100;
  uint64_t state = 12345;
  for (int round = 0; round < 20000; ++round) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const bool insert = reference.size() < kCapacity &&
                        (reference.empty() || (state >> 33) % 2 == 0);
    if (insert) {
      const uint32_t qp_num = next_qp++;
      const uint32_t slot = static_cast<uint32_t>(state >> 40) % kCapacity;
      table.Insert(qp_num, slot);
      reference[qp_num] = slot;
      all.push_back(qp_num);
    } else {
      auto it = reference.begin();
      std::advance(it, (state >> 20) % reference.size());
      table.Erase(it->first);
      reference.erase(it);
    }
    if (round % 1000 == 0) ExpectMatches(table, reference, all);
  }
  ExpectMatches(table, reference, all);
}

}  // namespace
}  // namespace rdma_transport
