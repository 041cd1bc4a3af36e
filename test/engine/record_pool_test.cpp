// The pool of op records (engine/detail/op_record.h, RecordPool): per-thread magazines, refilled from and spilled to a
// shared depot. Records a thread takes are distinct while it holds them; records released on another thread, which
// spills them, come back to a thread that takes records, through the depot, rather than new ones being made.
//
// What is checked, and why each check would catch a broken pool:
// - A fresh thread takes three magazines' worth: each refill must hand out records none of which it handed out before
//   (a refill that reused a magazine still held, or pushed onto a non-empty one, repeats records).
// - Another thread releases them all and exits: it spills twice and hands its last magazine over at exit. A third
//   fresh thread then takes as many, and gets back exactly the released records (the depot is a stack; no engine runs
//   in this test, and the threads of earlier tests are joined or idle in oneTBB, where they neither run ops nor exit,
//   so no other thread uses the depot meanwhile). A spill that lost a magazine would make the third thread carve new
//   records.
#include <catch2/catch.hpp>
#include <cstddef>
#include <set>
#include <thread>
#include <vector>

#include <depengine/engine/detail/op_record.h>

namespace depengine::test {
namespace {

using detail::OpRecord;
using detail::RecordPool;

// Takes `count` records on a new thread, which keeps none when it exits.
std::vector<OpRecord*> acquire_on_new_thread(std::size_t count) {
  std::vector<OpRecord*> records;
  std::thread([&] {
    for (std::size_t i = 0; i < count; ++i) records.push_back(RecordPool::acquire());
  }).join();
  return records;
}

TEST_CASE("record pool: records released on another thread come back through the depot", "[record_pool]") {
  constexpr std::size_t kCount = 3 * RecordPool::kMagazine;
  const std::vector<OpRecord*> first = acquire_on_new_thread(kCount);
  const std::set<OpRecord*> distinct(first.begin(), first.end());
  REQUIRE(distinct.size() == kCount);

  std::thread([&] {
    for (OpRecord* record : first) RecordPool::release(record);
  }).join();

  const std::vector<OpRecord*> again = acquire_on_new_thread(kCount);
  CHECK(std::set<OpRecord*>(again.begin(), again.end()) == distinct);
  std::thread([&] {
    for (OpRecord* record : again) RecordPool::release(record);
  }).join();
}

}  // namespace
}  // namespace depengine::test
