#include "examples/gradient_aggregation/aggregate.h"

#include <stdexcept>

#include <depengine/engine/engine.h>

namespace depengine::examples {
namespace {

constexpr std::size_t kMaxLayers = 3;
// Op names must outlive their ops: one table per kind of op.
constexpr const char* kReduce[kMaxLayers] = {"all-reduce 0", "all-reduce 1", "all-reduce 2"};
constexpr const char* kAccumulate[kMaxLayers] = {"accumulate 0", "accumulate 1", "accumulate 2"};

std::size_t weights_of(const Dense& layer) { return static_cast<std::size_t>(layer.in * layer.out); }

// Adds `from`'s dw and db (on device `device`) into `into`'s, on the op's stream. Device 0's gradients are on the
// channel's device already; any other device's are copied into `scratch` first. With `copy`, the slice is copied into
// `into` instead of added (the first slice of a sum).
void add_slice(const RunContext& ctx, const Dense& from, std::size_t device, const Dense& into, const Buffer& scratch,
               bool copy) {
  const std::size_t weights = weights_of(into);
  auto* to_w = static_cast<float*>(into.dw.data());
  auto* to_b = static_cast<float*>(into.db.data());
  auto* from_w = static_cast<const float*>(from.dw.data());
  auto* from_b = static_cast<const float*>(from.db.data());
  if (copy || device != 0) {
    auto* sum_w = static_cast<float*>(scratch.data());
    float* w = copy ? to_w : sum_w;
    float* b = copy ? to_b : sum_w + weights;
    copy_on(ctx, w, from_w, weights * sizeof(float), CopyDirection::kDeviceToDevice);
    copy_on(ctx, b, from_b, static_cast<std::size_t>(into.out) * sizeof(float), CopyDirection::kDeviceToDevice);
    if (copy) return;
    from_w = w;
    from_b = b;
  }
  add_on(ctx, to_w, from_w, into.in * into.out);
  add_on(ctx, to_b, from_b, into.out);
}

void push_sum(Device& channel, const std::vector<std::unique_ptr<Mlp>>& replicas, const Dense& into, std::size_t k,
              const Buffer& scratch) {
  std::vector<Var> reads;
  for (const auto& replica : replicas) {
    reads.push_back(replica->layers[k].dw.var());
    reads.push_back(replica->layers[k].db.var());
  }
  channel.engine.Push(
      [&replicas, &into, scratch, k](const RunContext& ctx) {
        for (std::size_t d = 0; d < replicas.size(); ++d) {
          add_slice(ctx, replicas[d]->layers[k], d, into, scratch, /*copy=*/d == 0);
        }
      },
      reads, {into.dw.var(), into.db.var(), scratch.var()}, {.context = channel.context, .name = kReduce[k]});
}

void push_accumulate(Device& channel, const std::vector<std::unique_ptr<Mlp>>& replicas, const Dense& into,
                     std::size_t k, const Buffer& scratch, std::uint64_t step, std::uint64_t& started) {
  // One member per device. The members add in any order, so the first of a step's group to run starts the sum: it
  // copies its slice where the others add theirs. `started` says whether that happened: the members are its only
  // users, one at a time (they all accumulate into the master's gradients). Every member but device 0's may pass its
  // slice through the shared scratch: it accumulates into the scratch too, so that no two members use it at once.
  for (std::size_t d = 0; d < replicas.size(); ++d) {
    const Dense& from = replicas[d]->layers[k];
    std::vector<Var> accumulates = {into.dw.var(), into.db.var()};
    if (d != 0) accumulates.push_back(scratch.var());
    channel.engine.PushAccumulate(
        [&from, &into, &started, scratch, d, step](const RunContext& ctx) {
          const bool first = started != step;
          started = step;
          add_slice(ctx, from, d, into, scratch, /*copy=*/first);
        },
        {from.dw.var(), from.db.var()}, {}, accumulates, {.context = channel.context, .name = kAccumulate[k]});
  }
}

}  // namespace

const char* aggregate_name(Aggregate aggregate) { return aggregate == Aggregate::kSum ? "sum" : "accumulate"; }

void push_aggregate(Aggregate aggregate, Device& channel, const std::vector<std::unique_ptr<Mlp>>& replicas,
                    const Mlp& master, std::size_t k, const Buffer& scratch, std::uint64_t step,
                    std::uint64_t& started) {
  if (k >= kMaxLayers || k >= master.layers.size()) throw std::invalid_argument("push_aggregate: no such layer");
  const Dense& into = master.layers[k];
  if (aggregate == Aggregate::kSum) {
    push_sum(channel, replicas, into, k, scratch);
  } else {
    push_accumulate(channel, replicas, into, k, scratch, step, started);
  }
}

}  // namespace depengine::examples
