// VarQueue's groups of accumulations on their own (engine/var_queue/var_queue.h, Groups; README.md): a group is
// granted whole once the uses before it have completed, joins while it ends the list, holds back what follows until
// every member has completed, and its completing member wakes the first member that asked for its token; an op of
// several groups takes their tokens all at once or none.
#include <catch2/catch.hpp>
#include <cstdint>
#include <functional>
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

// A member's asking for the token of one group: taken if free (or handed to it), else parked; `alone`: it is a member
// of this group only.
bool take(VarQueue& q, OpNode& op, bool alone = true) {
  q.lock();
  const bool free = q.token_free_locked(op);
  if (free) {
    q.take_token_locked(op);
  } else {
    q.park_locked(op, alone);
  }
  q.unlock();
  return free;
}

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
  CHECK(take(q, a2));
  CHECK_FALSE(take(q, a3));
  CHECK_FALSE(take(q, a1));
  CHECK(complete(a2.use) == std::vector<OpNode*>{&a3});
  CHECK(take(q, a3));  // handed to it: its own now
  CHECK(complete(a3.use) == std::vector<OpNode*>{&a1});
  CHECK(take(q, a1));
  CHECK(q.version() == 3);                              // the write and two members
  CHECK(complete(a1.use) == std::vector<OpNode*>{&r});  // the last member closes the group
  CHECK(q.version() == 4);
  CHECK(complete(r.use) == std::vector<OpNode*>{&a4});  // the next group, of one, after the read
  CHECK(take(q, a4));
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
  CHECK(take(q, a1));
  CHECK(complete(a1.use).empty());
  CHECK(take(q, a2));
  CHECK(complete(a2.use) == std::vector<OpNode*>{&w});
  CHECK(complete(w.use) == std::vector<OpNode*>{&late});
  CHECK(take(q, late));
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
  CHECK(take(q, a1));
  CHECK(complete(a1.use).empty());
  CHECK(take(q, a2));
  CHECK(complete(a2.use) == std::vector<OpNode*>{&r});
  CHECK(complete(r.use).empty());
  CHECK(idle(q));
}

// A member of several groups is woken, not handed the token: a member granted meanwhile may take it first, and the
// woken one parks again and is woken in its turn. A member of this group alone is handed it, and keeps its turn.
TEST_CASE("VarQueue groups: a member of several groups is woken and asks again; one of this group alone is handed it",
          "[var_queue][accumulate]") {
  VarQueue q;
  q.carry_groups();
  MemberOp a1{q, Access::kAccumulate}, a2{q, Access::kAccumulate}, a3{q, Access::kAccumulate};
  MemberOp a4{q, Access::kAccumulate}, a5{q, Access::kAccumulate};
  CHECK(a1.push());
  CHECK(a2.push());
  CHECK(take(q, a1));
  CHECK_FALSE(take(q, a2, false));
  CHECK(complete(a1.use) == std::vector<OpNode*>{&a2});  // woken, not handed the token
  CHECK(a3.push());
  CHECK(take(q, a3));  // granted after the wake, and first to ask
  CHECK_FALSE(take(q, a2, false));
  CHECK(a4.push());
  CHECK_FALSE(take(q, a4));                              // alone: parked behind a2
  CHECK(complete(a3.use) == std::vector<OpNode*>{&a2});  // woken again
  CHECK(take(q, a2, false));
  CHECK(complete(a2.use) == std::vector<OpNode*>{&a4});  // handed to a4
  CHECK(a5.push());
  CHECK_FALSE(take(q, a5));  // granted after the hand-off: a4 keeps its turn
  CHECK(take(q, a4));
  CHECK(complete(a4.use) == std::vector<OpNode*>{&a5});
  CHECK(take(q, a5));
  CHECK(complete(a5.use).empty());
  CHECK(q.version() == 5);
  CHECK(idle(q));
}

// The engine's taking of the tokens of an op of two groups (engine/detail/accumulation.cpp, take_tokens), in the
// queues' steps: under both locks, in address order, both tokens or none; parked on a held one, and every free token's
// first parked member woken (a wake passed on), appended to `woken`.
bool take_both(OpNode& op, VarQueue& a, VarQueue& b, std::vector<OpNode*>& woken) {
  VarQueue* const lower = std::less<>()(&a, &b) ? &a : &b;
  VarQueue* const upper = lower == &a ? &b : &a;
  lower->lock();
  upper->lock();
  VarQueue* const held = !lower->token_free_locked(op) ? lower : !upper->token_free_locked(op) ? upper : nullptr;
  for (VarQueue* queue : {lower, upper}) {
    if (held == nullptr) {
      queue->take_token_locked(op);
    } else if (OpNode* next = queue->wake_locked()) {
      woken.push_back(next);
    }
  }
  if (held != nullptr) held->park_locked(op, false);
  upper->unlock();
  lower->unlock();
  return held == nullptr;
}

// A member of groups on V1 and V2 waits for each token without holding the other: members of one group each run while
// it waits, and a wake it was given for a token it does not take passes to the member parked behind it.
TEST_CASE("VarQueue groups: tokens of two queues taken all at once or none, a wake passed on",
          "[var_queue][accumulate]") {
  VarQueue v1, v2;
  v1.carry_groups();
  v2.carry_groups();
  MemberOp x1{v1, Access::kAccumulate}, z1{v1, Access::kAccumulate}, y2{v2, Access::kAccumulate};
  OpNode both;
  VarUse both1{&v1, &both, nullptr, Access::kAccumulate, 0}, both2{&v2, &both, nullptr, Access::kAccumulate, 0};
  CHECK(x1.push());
  v1.lock();
  v2.lock();
  both.reset_wait(2);
  CHECK(v1.append_any_locked(both1));  // both queues' groups are open: granted at append
  CHECK(v2.append_any_locked(both2));
  v2.unlock();
  v1.unlock();
  CHECK(both.grant(2));
  CHECK(z1.push());
  CHECK(y2.push());
  std::vector<OpNode*> woken;
  CHECK(take(v1, x1));
  CHECK_FALSE(take_both(both, v1, v2, woken));  // V1 held by x1: parked, holding neither
  CHECK(woken.empty());
  CHECK(take(v2, y2));        // V2's token was left free
  CHECK_FALSE(take(v1, z1));  // behind both
  CHECK(complete(x1.use) == std::vector<OpNode*>{&both});
  CHECK_FALSE(take_both(both, v1, v2, woken));  // V2 held by y2: parks on it, and passes V1's wake to z1
  CHECK(woken == std::vector<OpNode*>{&z1});
  CHECK(take(v1, z1));
  CHECK(complete(y2.use) == std::vector<OpNode*>{&both});
  woken.clear();
  CHECK_FALSE(take_both(both, v1, v2, woken));  // V1 held by z1 now
  CHECK(woken.empty());
  CHECK(complete(z1.use) == std::vector<OpNode*>{&both});
  CHECK(take_both(both, v1, v2, woken));  // both free: both taken
  CHECK(woken.empty());
  CHECK(complete(both1).empty());
  CHECK(complete(both2).empty());
  CHECK(v1.version() == 3);
  CHECK(v2.version() == 2);
  CHECK(idle(v1));
  CHECK(idle(v2));
}

}  // namespace
}  // namespace depengine
