// GraphPlan: a captured step planned once for its replays (graph_plan.h): ops, edges, joins and relays; and the pool of
// instances its replays take.
#include <algorithm>
#include <memory>
#include <unordered_map>
#include <utility>

#include <depengine/engine/detail/graph_plan.h>

namespace depengine::detail {
namespace {

// What planning keeps per variable while it walks the captured ops in order. A writer is a write, or a group of
// accumulations (graph_plan.h, Groups), which stands for one.
struct VarWalk {
  std::vector<std::uint32_t> last_writer;    // the last write, or every member of the last group; empty: none yet
  std::vector<std::uint32_t> first_writer;   // the first write, or every member of the first group
  std::int64_t last_writer_use = -1;         // index into the plan's uses of the last writer's use of the variable
  std::vector<std::uint32_t> head_readers;   // reads before the first write
  std::vector<std::uint32_t> readers_since;  // reads since the last write (all reads while there was none)
  std::vector<std::uint32_t> before_group;   // what the open group's members follow: the writer and reads before it
  std::int64_t group = -1;                   // the open group's index: the last use was an accumulation; -1: none
  bool first_group_open = false;             // the open group is the first writer (its members are granted by the join)
};

}  // namespace

GraphPlan::GraphPlan(std::uint32_t engine_id, std::vector<CapturedOp> captured) : engine_id_(engine_id) {
  const auto count = static_cast<std::uint32_t>(captured.size());
  ops_.resize(count);
  names_.resize(count);
  std::vector<std::vector<std::uint32_t>> successors(count);
  std::vector<std::vector<std::uint32_t>> covers(count);
  std::vector<std::uint32_t> last_edge_to(count, count);  // successors[p] ends with i iff last_edge_to[p] == i
  std::vector<VarState*> order;                           // the variables, in order of first use
  std::vector<VarWalk> walks;
  std::vector<std::uint32_t> tags;
  std::unordered_map<const VarState*, std::size_t> index_of;
  auto walk_of = [&](VarState* var, std::uint32_t tag) -> VarWalk& {
    const auto [it, fresh] = index_of.try_emplace(var, order.size());
    if (!fresh) return walks[it->second];
    order.push_back(var);
    tags.push_back(tag);
    return walks.emplace_back();
  };
  for (std::uint32_t i = 0; i < count; ++i) {
    CapturedOp& from = captured[i];
    Op& op = ops_[i];
    op.fn = std::move(from.fn);
    op.executor = from.executor;
    op.priority = from.priority;
    op.no_skip = from.no_skip;
    op.async = from.async;
    op.named = from.named;
    if (from.named) names_[i] = std::move(from.name);
    op.scope = std::move(from.scope);
    if (op.scope.get() != nullptr) scoped_.push_back(op.scope.get());
    op.uses.begin = static_cast<std::uint32_t>(uses_.size());
    auto edge = [&](std::int64_t from_op) {
      const auto p = static_cast<std::uint32_t>(from_op);
      if (last_edge_to[p] == i) return;  // already a predecessor through another variable
      last_edge_to[p] = i;
      successors[p].push_back(i);
      ++op.wait;
    };
    const auto tokens_begin = static_cast<std::uint32_t>(tokens_.size());
    for (const CapturedOp::Use& use : from.uses) {
      VarWalk& walk = walk_of(use.var, use.tag);
      if (use.access != Access::kAccumulate) {
        walk.group = -1;  // a read or a write closes the open group
        walk.first_group_open = false;
      }
      if (use.access == Access::kRead) {
        if (!walk.last_writer.empty()) {
          for (const std::uint32_t writer : walk.last_writer) edge(writer);
        } else {
          walk.head_readers.push_back(i);
          ++op.wait;  // granted by the head join
        }
        walk.readers_since.push_back(i);
      } else {
        if (use.access == Access::kAccumulate && walk.group < 0) {  // opens a group: it follows what one write would
          walk.before_group = walk.last_writer;
          walk.before_group.insert(walk.before_group.end(), walk.readers_since.begin(), walk.readers_since.end());
          walk.group = groups_++;
          walk.first_group_open = walk.first_writer.empty();
          walk.last_writer.clear();
        } else if (use.access != Access::kAccumulate) {
          for (const std::uint32_t writer : walk.last_writer) edge(writer);
          for (const std::uint32_t reader : walk.readers_since) edge(reader);
          walk.last_writer.clear();
        }
        if (use.access == Access::kAccumulate) {
          for (const std::uint32_t before : walk.before_group) edge(before);
          tokens_.push_back(static_cast<std::uint32_t>(walk.group));
        }
        walk.readers_since.clear();
        if (walk.first_writer.empty() || walk.first_group_open) {
          walk.first_writer.push_back(i);
          ++op.wait;  // granted by the middle join
        }
        walk.last_writer.push_back(i);
        walk.last_writer_use = static_cast<std::int64_t>(uses_.size());
      }
      const bool mutation = use.access == Access::kWrite || use.access == Access::kAccumulate;
      uses_.push_back(Use{use.var, use.tag, use.access, mutation, from.ends_var});
    }
    // Ascending: the order a member locks its tokens in (GraphRunner::take_tokens), so no two wait for each other.
    std::sort(tokens_.begin() + tokens_begin, tokens_.end());
    op.tokens = Range{tokens_begin, static_cast<std::uint32_t>(tokens_.size())};
    op.uses.end = static_cast<std::uint32_t>(uses_.size());
    if (op.wait == 0) roots_.push_back(i);
  }
  // Joins, in the order of the variables' addresses (the order a push locks them in).
  std::vector<std::size_t> by_address(order.size());
  for (std::size_t v = 0; v < order.size(); ++v) by_address[v] = v;
  std::sort(by_address.begin(), by_address.end(), [&](std::size_t a, std::size_t b) { return order[a] < order[b]; });
  for (const std::size_t v : by_address) {
    VarWalk& walk = walks[v];
    auto add_join = [&](Access access, const std::vector<std::uint32_t>& grants,
                        const std::vector<std::uint32_t>& done) {
      Join join{order[v], tags[v], access, static_cast<std::int32_t>(done.size()), {}};
      join.targets.begin = static_cast<std::uint32_t>(targets_.size());
      targets_.insert(targets_.end(), grants.begin(), grants.end());
      join.targets.end = static_cast<std::uint32_t>(targets_.size());
      for (std::uint32_t op : done) covers[op].push_back(static_cast<std::uint32_t>(joins_.size()));
      joins_.push_back(join);
    };
    if (!walk.head_readers.empty()) add_join(Access::kRead, walk.head_readers, walk.head_readers);
    if (!walk.first_writer.empty()) {
      add_join(Access::kWrite, walk.first_writer, walk.last_writer);
      uses_[static_cast<std::size_t>(walk.last_writer_use)].counts_version = false;  // the middle join counts it
      if (!walk.readers_since.empty()) add_join(Access::kRead, {}, walk.readers_since);
    }
  }
  // Fan-ins (graph_plan.h): each run of consecutive predecessors of a wide fan-in, kRelayGroup at a time, through a
  // relay.
  std::vector<std::uint32_t> fan_in(count, 0);
  for (const std::vector<std::uint32_t>& next : successors) {
    for (const std::uint32_t s : next) ++fan_in[s];
  }
  std::vector<std::vector<std::uint32_t>> wide;     // the predecessors of each wide fan-in, in index order
  std::vector<std::uint32_t> wide_index(count, 0);  // 1 + its index in `wide`, 0 for an op that is not one
  for (std::uint32_t p = 0; p < count; ++p) {
    for (const std::uint32_t s : successors[p]) {
      if (fan_in[s] <= kRelayAbove) continue;
      if (wide_index[s] == 0) {
        wide.emplace_back();
        wide_index[s] = static_cast<std::uint32_t>(wide.size());
      }
      wide[wide_index[s] - 1].push_back(p);
    }
  }
  for (std::uint32_t s = 0; s < count; ++s) {
    if (wide_index[s] == 0) continue;
    const std::vector<std::uint32_t>& preds = wide[wide_index[s] - 1];
    for (std::size_t i = 0; i < preds.size();) {
      std::size_t end = i + 1;  // [i, end): consecutive ops, at most kRelayGroup
      while (end < preds.size() && end - i < kRelayGroup && preds[end] == preds[end - 1] + 1) ++end;
      if (end - i >= kRelayMin) {
        const auto relay = count + static_cast<std::uint32_t>(relays_.size());
        relays_.push_back(Relay{static_cast<std::int32_t>(end - i), s});
        ops_[s].wait -= static_cast<std::int32_t>(end - i) - 1;  // their grants become the relay's one
        for (std::size_t k = i; k < end; ++k)
          *std::find(successors[preds[k]].begin(), successors[preds[k]].end(), s) = relay;
      }
      i = end;
    }
  }
  for (std::uint32_t i = 0; i < count; ++i) {
    ops_[i].successors.begin = static_cast<std::uint32_t>(successors_.size());
    for (const std::uint32_t s : successors[i]) successors_.push_back(s < count && ops_[s].wait == 1 ? s | kSole : s);
    ops_[i].successors.end = static_cast<std::uint32_t>(successors_.size());
    ops_[i].covers.begin = static_cast<std::uint32_t>(covered_.size());
    covered_.insert(covered_.end(), covers[i].begin(), covers[i].end());
    ops_[i].covers.end = static_cast<std::uint32_t>(covered_.size());
    ops_[i].retires = successors[i].empty() || ops_[i].async;
    if (ops_[i].retires) ++retirers_;
  }
  // Chains (graph_plan.h): an op whose one successor waits for it alone, on the same executor, neither of them a member
  // of groups, the op not async (its Completion may come on any thread, at any time).
  for (std::uint32_t i = 0; i < count; ++i) {
    Op& op = ops_[i];
    if (successors[i].size() != 1 || successors[i][0] >= count || op.async || op.tokens.begin != op.tokens.end)
      continue;
    const Op& next = ops_[successors[i][0]];
    op.chained = next.wait == 1 && next.executor == op.executor && next.tokens.begin == next.tokens.end;
  }
}

GraphPlan::~GraphPlan() = default;

void GraphPlan::drop_functions() noexcept {
  for (Op& op : ops_) op.fn.reset();
}

GraphInstance* GraphPlan::take() {
  std::lock_guard lock(pool_mutex_);
  if (free_.empty()) {
    instances_.push_back(std::make_unique<GraphInstance>(*this));
    free_.reserve(instances_.size());  // give_back() then never allocates
    return instances_.back().get();
  }
  GraphInstance* instance = free_.back();
  free_.pop_back();
  return instance;
}

void GraphPlan::give_back(GraphInstance* instance) noexcept {
  std::lock_guard lock(pool_mutex_);
  free_.push_back(instance);  // capacity reserved by take()
}

GraphInstance::GraphInstance(GraphPlan& planned_by)
    : plan(planned_by),
      ops(std::make_unique<GraphOp[]>(planned_by.size())),
      joins(std::make_unique<GraphJoin[]>(planned_by.joins().size())),
      relays(std::make_unique<GraphRelay[]>(planned_by.relays().size())),
      tokens(std::make_unique<GroupToken[]>(planned_by.groups())) {
  for (std::size_t r = 0; r < planned_by.relays().size(); ++r) relays[r].reset_wait(planned_by.relays()[r].wait);
  for (std::uint32_t i = 0; i < planned_by.size(); ++i) {
    const GraphPlan::Op& op = planned_by.op(i);
    ops[i].prepare(op.executor, op.priority, this);
    ops[i].reset_wait(op.wait);
  }
  for (std::size_t j = 0; j < planned_by.joins().size(); ++j) {
    const GraphPlan::Join& planned = planned_by.joins()[j];
    GraphJoin& join = joins[j];
    join.owner_kind = kGraphJoin;
    join.reset_wait(GraphJoin::kGrants);
    join.use = VarUse{planned.var, &join, nullptr, planned.access, planned.tag};
    join.pending.store(planned.covers, std::memory_order_relaxed);  // relaxed: published with the instance
    join.instance = this;
  }
}

}  // namespace depengine::detail
