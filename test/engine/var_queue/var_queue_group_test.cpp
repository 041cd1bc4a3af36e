// VarQueue's groups of accumulations on their own (engine/var_queue/var_queue.h, Groups; README.md): a group is
// granted whole once the uses before it have completed, joins while it ends the list, holds back what follows until
// every member has completed, and its token goes from the completing member to the first member that asked for it.
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include <depengine/engine/var_queue/op_node.h>
#include <depengine/engine/var_queue/var_queue.h>

#include "test/engine/var_queue/var_queue_test_support.h"

namespace depengine {
namespace {

using test::complete;
using test::idle;

// An op of one use, pushed as the engine pushes one: its counter set to its grant, granted at append or later.
struct MemberOp : OpNode {
  VarUse use;
  MemberOp(VarQueue& queue, Access access) : use{&queue, this, nullptr, access, 0} {}
  bool push() {
    use.var->lock();
    reset_wait(1);
    const bool at_append = use.var->append_any_locked(use);
    use.var->unlock();
    return at_append;
  }
};

TEST_CASE("VarQueue groups: granted whole after the write before, joined at the end, before the read after",
          "[var_queue][accumulate]") {
  VarQueue q;
  q.carry_groups();
  MemberOp w{q, Access::kWrite}, a1{q, Access::kAccumulate}, a2{q, Access::kAccumulate}, a3{q, Access::kAccumulate};
  CHECK(w.push());
  CHECK_FALSE(a1.push());
  CHECK_FALSE(a2.push());
  CHECK(complete(w.use) == std::vector<OpNode*>{&a1, &a2});  // the whole run, together
  CHECK(a3.push());                                          // the open group ends the list: a3 joins it
  MemberOp r{q, Access::kRead}, a4{q, Access::kAccumulate};
  CHECK_FALSE(r.push());   // waits for the whole group
  CHECK_FALSE(a4.push());  // behind the read: the next group
  // The token: a2 takes it, a1 and a3 park in the order they ask, and each completion hands it to the next.
  CHECK(q.try_take_token(a2));
  CHECK_FALSE(q.try_take_token(a3));
  CHECK_FALSE(q.try_take_token(a1));
  CHECK(complete(a2.use) == std::vector<OpNode*>{&a3});
  CHECK(q.try_take_token(a3));  // handed to it: its own now
  CHECK(complete(a3.use) == std::vector<OpNode*>{&a1});
  CHECK(q.try_take_token(a1));
  CHECK(q.version() == 3);                              // the write and two members
  CHECK(complete(a1.use) == std::vector<OpNode*>{&r});  // the last member closes the group
  CHECK(q.version() == 4);
  CHECK(complete(r.use) == std::vector<OpNode*>{&a4});  // the next group, of one, after the read
  CHECK(q.try_take_token(a4));
  CHECK(complete(a4.use).empty());
  CHECK(idle(q));
}

TEST_CASE("VarQueue groups: a group behind running reads opens when the last read completes",
          "[var_queue][accumulate]") {
  VarQueue q;
  q.carry_groups();
  MemberOp r1{q, Access::kRead}, r2{q, Access::kRead}, a1{q, Access::kAccumulate}, a2{q, Access::kAccumulate};
  CHECK(r1.push());
  CHECK(r2.push());
  CHECK_FALSE(a1.push());
  CHECK_FALSE(a2.push());
  MemberOp w{q, Access::kWrite};
  CHECK_FALSE(w.push());
  CHECK(complete(r2.use).empty());
  CHECK(complete(r1.use) == std::vector<OpNode*>{&a1, &a2});
  MemberOp late{q, Access::kAccumulate};
  CHECK_FALSE(late.push());  // a write waits behind the group: the late one starts a group of its own after it
  CHECK(q.try_take_token(a1));
  CHECK(complete(a1.use).empty());
  CHECK(q.try_take_token(a2));
  CHECK(complete(a2.use) == std::vector<OpNode*>{&w});
  CHECK(complete(w.use) == std::vector<OpNode*>{&late});
  CHECK(q.try_take_token(late));
  CHECK(complete(late.use).empty());
  CHECK(q.version() == 4);
  CHECK(idle(q));
}

TEST_CASE("VarQueue groups: an accumulation on an idle queue is granted at append", "[var_queue][accumulate]") {
  VarQueue q;
  q.carry_groups();
  MemberOp a1{q, Access::kAccumulate}, a2{q, Access::kAccumulate}, r{q, Access::kRead};
  CHECK(a1.push());
  CHECK(a2.push());
  CHECK_FALSE(r.push());
  CHECK(q.try_take_token(a1));
  CHECK(complete(a1.use).empty());
  CHECK(q.try_take_token(a2));
  CHECK(complete(a2.use) == std::vector<OpNode*>{&r});
  CHECK(complete(r.use).empty());
  CHECK(idle(q));
}

}  // namespace
}  // namespace depengine
