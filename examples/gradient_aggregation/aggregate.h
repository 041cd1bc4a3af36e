// The two ways gradient_aggregation sums the replicas' gradients of one layer into the master's, on the collective
// channel (device 0, where the master lives):
//
//   kSum         one op that reads every replica's gradients: it starts once the last device's backward is done, then
//                copies and adds the N slices in series (the aggregation before issue 47).
//   kAccumulate  one accumulation per replica (Engine::PushAccumulate into the master's gradients): each adds its
//                replica's slice as soon as that replica's backward is done, so after the slowest device only its own
//                slice is left to add. Each is issued once its device's backward is issued, and the channel, one
//                in-order stream, runs them in issue order: a device that finishes early waits only for those pushed
//                before it. The first member of a step to run copies its slice instead of adding it (no zeroing op:
//                the same copies and adds as kSum, in another order).
//
// Both leave the same sum in the master's dw and db, up to float rounding (the order of the adds differs), for the SGD
// update pushed after them. Why the channel: the sum lives on device 0, and an add reads its operands on the device
// it runs on, so every slice but device 0's is first copied to device 0 (`scratch`); a member on device d's own
// stream would have to add into another device's memory. The channel is also where the update and the broadcast go,
// so they follow the last add without a wait on another stream.
//
// Lifetime: the replicas, the master, the buffers and `started` must outlive the ops pushed here (they refer to
// them). Nothing here waits. Cost: kSum pushes 1 op, kAccumulate N; each allocates only what a push does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <depengine/buffers/buffer.h>

#include "examples/common/mlp.h"

namespace depengine::examples {

enum class Aggregate { kSum = 0, kAccumulate = 1 };  // also indices (gradient_aggregation.cpp times each)

// "sum" or "accumulate".
[[nodiscard]] const char* aggregate_name(Aggregate aggregate);

// Layer k's gradients of every replica, summed into master.layers[k].dw and .db on `channel`. `scratch` holds one
// layer's dw and db, (in + 1) * out floats, on device 0. The ops mutate (kSum) or accumulate into (kAccumulate) the
// master's dw, db and the scratch, and read the replicas'. `step` numbers the training step, a new number at each
// call for layer k; `started`, one per layer, holds the step whose sum kAccumulate last started (any other value at
// first, such as ~0): the ops read and write it when they run, as part of the master's gradients.
void push_aggregate(Aggregate aggregate, Device& channel, const std::vector<std::unique_ptr<Mlp>>& replicas,
                    const Mlp& master, std::size_t k, const Buffer& scratch, std::uint64_t step,
                    std::uint64_t& started);

}  // namespace depengine::examples
