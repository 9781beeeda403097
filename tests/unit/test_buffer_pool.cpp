// core/buffer_pool.hpp: buffers come back without new memory, the smallest adequate one is taken,
// a full pool keeps the larger buffers, and a buffer taken is always exactly the size asked for.
#include <gtest/gtest.h>

#include <vector>

#include "core/buffer_pool.hpp"

namespace layertap {
namespace {

TEST(BufferPool, GivesBackTheSameMemory) {
  BufferPool pool(2);
  bool fresh = false;
  std::vector<std::byte> a = pool.take(1000, &fresh);
  EXPECT_TRUE(fresh);
  EXPECT_EQ(a.size(), 1000u);
  const std::byte* where = a.data();
  pool.give(std::move(a));
  std::vector<std::byte> b = pool.take(600, &fresh);  // smaller: the same memory, no reallocation
  EXPECT_FALSE(fresh);
  EXPECT_EQ(b.size(), 600u);
  EXPECT_EQ(b.data(), where);
  std::vector<std::byte> c = pool.take(600, &fresh);  // none kept now: new
  EXPECT_TRUE(fresh);
}

TEST(BufferPool, TakesTheSmallestThatFitsAndGrowsNothing) {
  BufferPool pool(3);
  pool.give(std::vector<std::byte>(100));
  pool.give(std::vector<std::byte>(500));
  pool.give(std::vector<std::byte>(300));
  bool fresh = true;
  EXPECT_EQ(pool.take(250, &fresh).capacity(), 300u);
  EXPECT_FALSE(fresh);
  EXPECT_EQ(pool.take(600, &fresh).size(), 600u);  // none holds 600 without growing: a new one
  EXPECT_TRUE(fresh);
}

TEST(BufferPool, AFullPoolKeepsTheLargerBuffers) {
  BufferPool pool(2);
  pool.give(std::vector<std::byte>(100));
  pool.give(std::vector<std::byte>(200));
  pool.give(std::vector<std::byte>(400));  // replaces the 100
  pool.give(std::vector<std::byte>(50));   // smaller than every kept one: freed
  bool fresh = true;
  EXPECT_EQ(pool.take(300, &fresh).capacity(), 400u);
  EXPECT_FALSE(fresh);
  EXPECT_EQ(pool.take(150, &fresh).capacity(), 200u);
  EXPECT_FALSE(fresh);
  pool.take(10, &fresh);
  EXPECT_TRUE(fresh);  // the 100 and the 50 are gone
}

}  // namespace
}  // namespace layertap
