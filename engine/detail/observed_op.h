// ObservedOp: what the engine keeps of an op's life for its observers (observer.h) between the op's events, so that
// each event carries the times of the steps before it. In a pushed op's record (op_record.h, line 6) and, for a
// replayed op, in its replay's instance (graph_plan.h); written only on engines with observers.
//
// Thread safety: written by the thread that passes the op through each step (pusher, last granter, runner) and read by
// the next one, which the op's own hand-offs order (the queue's grant, the executor's submit, the completion).
#pragma once

#include <cstdint>

namespace depengine::detail {

struct ObservedOp {
  std::uint64_t id = 0;  // OpEvent::id
  std::int64_t pushed_at = 0, ready_at = 0, started_at = 0;
  std::int32_t worker = -1;
  bool stream = false;   // a stream op, issued: its stream is the record's issued_at
  bool readied = false;  // OnReady was called: an accumulation that parked on a token is routed again when woken
};
static_assert(sizeof(ObservedOp) == 40, "fits beside the async holders on the record's line 6");

}  // namespace depengine::detail
