// GraphPlan: what Engine::Capture found out about a step once, so that Engine::Replay does not find it out again; and
// the instances that replays run.
//
// Capture (graph_capture.cpp) records each push of the capturing thread (its function, executor, priority, name,
// no_skip and folded variable list) and then plans the graph:
//
//   - Edges among the graph's own ops, by MXNet's rule applied once: a read of V follows the graph's last write of V
//     before it; a write of V follows that write and every read of V since. Each op's wait count is the number of its
//     distinct predecessors plus the joins (below) that grant it.
//   - Groups (accumulations, Access::kAccumulate; docs/accumulate.md): consecutive accumulations of V form a group,
//     which stands where one write would. Each member follows the write (or group) and the reads before the group,
//     and what follows the group follows every member; members have no edges among themselves. Instead each group has
//     a token in the instance (GroupToken): a member takes the tokens of its groups all at once, under their locks, or
//     parks on one that is held, holding none (GraphRunner::take_tokens); a member's completion frees each and wakes
//     the first member parked on it, handing it the token if it is a member of that group alone. So members run alone
//     on V, in the order they become ready, as pushed members do (engine/var_queue/README.md, Groups, Deadlock).
//   - Joins: how the graph sits in the queue of each variable it uses. Per variable, in queue order, at most three
//     VarQueue entries, standing for the graph's uses of it as if they had been pushed one by one:
//         head   a read entry for the reads before the graph's first write of V (all of them if it never writes V):
//                granted with the reads pushed before it, it grants those readers; it completes when they have.
//         middle a write entry from the first write to the last: it grants the first writer and completes when the
//                last writer does (every use of V in between follows the first writer and precedes the last). A group
//                stands for a writer here: every member of the first group is granted, every member of the last
//                covered.
//         tail   a read entry for the reads after the last write: granted when the middle one completes (the readers
//                are granted by the last writer's completion, an edge), it holds later writers back until the readers
//                complete, while later reads run beside them.
//     So the graph's first users of V wait only for what was pushed before on V, and later pushes on V wait only for
//     the graph's last users of V. A mutation other than the last writer's counts V's version itself (the middle
//     entry's completion counts the last), so Version() stays exact.
//
// Replay (graph_runner.cpp) takes a free instance, appends its joins to their queues under all their locks (as a push
// does, in the order of the variables' addresses), and submits the ops nothing holds back. An op's completion poisons
// and counts what it mutates, completes the joins it was the last to cover, and grants its successors; the instance is
// free again when the replay has retired (below).
//
// Retirement. A replay is in flight, and its instance busy, until every op has completed; counting each op out would
// trade the instance's line between workers at every op. Only sinks (ops without successors), async ops and joins
// count: every other op leads through its successors to a sink that cannot retire before it has granted them, and it
// touches the instance no more after its last grant. An async op may still be running its function (which the plan
// owns) after its Completion granted its successors, so it counts too: it retires once both its function has
// returned and its Completion was called. The Completion points at a pooled OpRecord (records are never freed, so a
// stale call stays memory-safe, as for a pushed op), whose `replayed` names the GraphOp. The last one out frees the
// instance and counts the replay's ops out of flight at once.
//
// Fan-ins. An op with many predecessors (a writer after 64 readers) would take one grant from each on its own counter,
// and with readers spread over two workers that counter's line would cross between their cores at nearly every grant.
// Planning gives such an op relays instead: counters that stand for a run of kRelayMin to kRelayGroup predecessors
// captured one after the other, which grant the op once when all of theirs have granted them. Ops captured one after
// the other are typically made ready together (the readers of a fan-out), and a worker that steals takes a run of
// them (executors/threadpool/README.md), so a relay's grants mostly come from one worker, and the op's own counter
// takes one grant per relay. Predecessors scattered through the step (an op reading many variables) stay direct:
// there a relay would only add a line and a grant. A successor index at or past size() names a relay.
//
// Sole grants. An op that waits for one grant alone (a wait of 1: one predecessor, or one join, and nothing else) is
// made ready by that grant without counting it: its successor entry carries kSole (a join's target is looked up in the
// plan), and neither the granting thread nor the one that runs the op writes its count, which stays 1 from replay to
// replay. On a fan-out, that is a locked instruction fewer per reader, and a store fewer to the reader's line by the
// thread that runs it.
//
// Chains. An op is chained to its successor when that is its only one and waits for nothing else (no other
// predecessor, no join: a wait of 1), runs on the same executor, and neither is a member of a group, nor the op async
// (its Completion may come on any thread). The thread that completes a chained op then runs the successor itself,
// without granting it (GraphRunner::execute): as an executor keeps the one op a completion made ready (executor.h),
// but without the grant, the trip back through the executor, or a read of the successor's line, which the worker that
// ran it in the last replay may hold. Its count, never taken down, is still the planned one for the next replay. Only
// while the completion made nothing else ready (else the executor chooses among them, as it would), and with no
// observer or trace (whose events tell each op's grant). Like a pool's worker along a chain of pushed ops, the thread
// follows the chain to its end (a long chain holds it as one long op would).
//
// Instances keep their state between replays: an op that counts its grants restores its wait count when it starts
// (nothing grants it again in that replay), and a join restores its counts when it is granted and completed, so a
// replay writes only the joins and the ops granted at append, not every op.
//
// Thread safety: a plan is immutable after capture but for its instance pool (a mutex) and replay counter (an atomic);
// its functions are called from the threads that run its ops, and concurrently when replays overlap.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <utility>
#include <vector>

#include <depengine/engine/cancel_scope.h>
#include <depengine/engine/detail/observed_op.h>
#include <depengine/engine/detail/op_function.h>
#include <depengine/engine/detail/var_table.h>
#include <depengine/engine/op_name.h>
#include <depengine/engine/push_options.h>
#include <depengine/engine/var_queue/op_node.h>
#include <depengine/executors/executor.h>
#include <depengine/support/cache_line.h>
#include <depengine/support/spinlock.h>

namespace depengine::detail {

class GraphInstance;

// The tags OpNode::owner_kind and Task::host_kind_ carry, so that the engine tells its nodes apart where queues and
// executors hand them back.
enum NodeKind : std::uint8_t {
  kPushedOp = 0,       // an OpRecord (op_record.h)
  kGraphOp = 1,        // a GraphOp
  kGraphJoin = 2,      // a GraphJoin (an OpNode only)
  kAccumulatingOp = 3  // an OpRecord that accumulates and has not yet taken its groups' tokens (accumulation.cpp)
};

// One op of a replay.
struct alignas(support::kCacheLine) GraphOp final : Task, OpNode {
  void prepare(Executor* runs_on, std::int32_t urgency, GraphInstance* owner) noexcept {
    executor_ = runs_on;
    priority_ = urgency;
    host_kind_ = kGraphOp;
    owner_kind = kGraphOp;
    instance = owner;
  }
  GraphInstance* instance = nullptr;
};
static_assert(sizeof(GraphOp) == 64, "one line per op: workers running neighbours do not share one");

// A counter standing for a run of an op's predecessors (see Fan-ins above): granted by each, it grants the op once.
struct alignas(support::kCacheLine) GraphRelay final : OpNode {};
static_assert(sizeof(GraphRelay) == 64, "one line per relay: relays granted by different workers do not share one");

// One of a replay's entries in a variable's queue (see Joins above). The queue grants its OpNode, which waits for two
// grants: the queue's, and the replaying thread's once it has published the whole replay (a queue may grant an entry
// as soon as it is linked: var_queue.h).
struct GraphJoin final : OpNode {
  static constexpr std::int32_t kGrants = 2;
  VarUse use;
  bool linked = false;  // the replaying thread's: the entry waits in its queue (it was not granted at append)
  // The covered ops that have not completed yet; the one that takes it to zero completes the entry.
  std::atomic<std::int32_t> pending{0};
  GraphInstance* instance = nullptr;
};

// A reference to a CancelScope's state, held by a captured op and then by its plan: a scope lives as long as the graphs
// that name it. Each replay counts the scope's ops in (ScopeState::op_pushed) and out as they complete.
class ScopeHold {
 public:
  ScopeHold() = default;
  explicit ScopeHold(ScopeState* state) noexcept : state_(state) {
    // relaxed: a new reference from one the caller holds, as shared_ptr's copy.
    if (state_ != nullptr) state_->refs.fetch_add(1, std::memory_order_relaxed);
  }
  ScopeHold(ScopeHold&& other) noexcept : state_(std::exchange(other.state_, nullptr)) {}
  ScopeHold& operator=(ScopeHold&& other) noexcept {
    std::swap(state_, other.state_);
    return *this;
  }
  ~ScopeHold() {
    if (state_ != nullptr) ScopeState::release(state_);
  }
  [[nodiscard]] ScopeState* get() const noexcept { return state_; }

 private:
  ScopeState* state_ = nullptr;
};

// One push made inside a capture.
struct CapturedOp {
  struct Use {
    VarState* var;
    std::uint32_t tag;  // the handle's generation
    Access access;
  };
  OpFunction fn;
  Executor* executor = nullptr;
  std::int32_t priority = 0;
  bool no_skip = false;
  bool async = false;
  bool named = false;
  OpName name;
  std::vector<Use> uses;  // sorted and folded, as the push had them
  ScopeHold scope;        // PushOptions::scope's, or none
  // Its placement (Context), for a stream op.
  std::uint32_t device = 0;
  StreamKind stream_kind = StreamKind::kCompute;
  std::int32_t stream = -1;
  // The captured deletion of a variable made in the capture (graph.h, "Variables of a graph"): at each replay, the
  // step's end of that variable, its one use, which clears the variable's error; its deleter waits for the graph's end.
  bool ends_var = false;
};

// A variable made inside a capture and deleted in it: the graph's, deleted for real (running `deleter`) when the graph
// is destroyed.
struct OwnedVar {
  VarState* var = nullptr;
  std::uint32_t tag = 0;  // its generation since the captured deletion, which killed every handle made before
  OpFunction deleter;
  PushOptions options;  // the deletion's placement, priority and name (no scope, no fences)
};

// What a capturing thread has recorded so far (running.h, Running::capture).
struct CaptureState {
  std::vector<CapturedOp> ops;
  std::unordered_set<const VarState*> made;  // the variables made on the capturing thread during the capture
  std::vector<OwnedVar> owned;               // those of them deleted in it
};

class GraphPlan {
 public:
  // A range [begin, end) of one of the index vectors below.
  struct Range {
    std::uint32_t begin = 0;
    std::uint32_t end = 0;
  };
  // What a replay reads of an op as it runs and completes it, on two lines of its own; its name, read only when it is
  // named, lives apart (name_of()).
  struct alignas(support::kCacheLine) Op {
    OpFunction fn;
    Executor* executor = nullptr;
    std::int32_t priority = 0;
    std::int32_t wait = 0;  // distinct predecessors + joins that grant it
    bool no_skip = false;
    bool async = false;    // pushed with PushAsync: it completes when its Completion is called
    bool retires = false;  // counts the replay down when done: a sink, or an async op (see Retirement above)
    bool named = false;    // names_ holds its name
    bool chained = false;  // its one successor has no other grant (see Chains above)
    Range uses;            // into uses_
    Range successors;      // into successors_
    Range covers;          // into covered_: the joins whose pending count it takes down when it completes
    Range tokens;          // into tokens_: the groups it is a member of (see Groups above)
    ScopeHold scope;       // PushOptions::scope's, or none: cancelled, the op completes with its error, unrun
  };
  static_assert(sizeof(Op) == 2 * support::kCacheLine, "a replayed op's plan: two lines");
  struct Use {
    VarState* var = nullptr;
    std::uint32_t tag = 0;  // the handle's generation
    Access access = Access::kRead;
    bool counts_version = false;  // a mutation whose completion counts the version itself (not a middle join's last)
    bool clears = false;          // a graph variable's end (CapturedOp::ends_var): completing it clears its error
  };
  // See Fan-ins above: an op with more than kRelayAbove predecessors takes runs of kRelayMin to kRelayGroup of them
  // through relays.
  static constexpr std::uint32_t kRelayAbove = 16;
  static constexpr std::uint32_t kRelayMin = 4;
  static constexpr std::uint32_t kRelayGroup = 8;
  struct Relay {
    std::int32_t wait = 0;     // the predecessors it stands for
    std::uint32_t target = 0;  // the op it grants
  };
  struct Join {
    VarState* var = nullptr;
    std::uint32_t tag = 0;
    Access access = Access::kRead;
    std::int32_t covers = 0;  // the ops that must complete before the entry does
    Range targets;            // into targets_: the ops its grant grants
  };

  // Plans `ops`, captured in push order from the engine whose id (VarTable::engine_id) is `engine_id`.
  GraphPlan(std::uint32_t engine_id, std::vector<CapturedOp> ops);
  ~GraphPlan();
  GraphPlan(const GraphPlan&) = delete;
  GraphPlan& operator=(const GraphPlan&) = delete;

  // The capturing engine's id: never reused in the process, so a graph outliving its engine is never taken for
  // another's.
  [[nodiscard]] std::uint32_t engine_id() const noexcept { return engine_id_; }
  [[nodiscard]] std::size_t size() const noexcept { return ops_.size(); }
  [[nodiscard]] Op& op(std::uint32_t index) noexcept { return ops_[index]; }
  [[nodiscard]] const Op& op(std::uint32_t index) const noexcept { return ops_[index]; }
  // The name `op` (one of this plan's ops) was pushed with; empty if none.
  [[nodiscard]] std::string_view name_of(const Op& op) const noexcept {
    return op.named ? names_[static_cast<std::size_t>(&op - ops_.data())].view() : std::string_view{};
  }
  [[nodiscard]] const std::vector<Join>& joins() const noexcept { return joins_; }
  [[nodiscard]] const Use* uses(const Op& op) const noexcept { return uses_.data() + op.uses.begin; }
  // In a successor entry: the op it names waits for this grant alone (see Sole grants above).
  static constexpr std::uint32_t kSole = std::uint32_t{1} << 31;
  // The most ops a plan takes (Capture refuses more): its ops and relays (at most one per kRelayMin ops) are numbered
  // below kSole.
  static constexpr std::size_t kMaxOps = std::size_t{1} << 30;
  // An op's successors: an index below size() is an op, one at size() + r the relay relays()[r] (below kSole), and one
  // with kSole set the op kSole ^ index, which waits for this grant alone.
  [[nodiscard]] const std::uint32_t* successors(const Op& op) const noexcept {
    return successors_.data() + op.successors.begin;
  }
  [[nodiscard]] const std::vector<Relay>& relays() const noexcept { return relays_; }
  [[nodiscard]] const std::uint32_t* covered(const Op& op) const noexcept { return covered_.data() + op.covers.begin; }
  [[nodiscard]] const std::uint32_t* targets(const Join& join) const noexcept {
    return targets_.data() + join.targets.begin;
  }
  [[nodiscard]] const std::uint32_t* tokens(const Op& op) const noexcept { return tokens_.data() + op.tokens.begin; }
  // The groups of accumulations (see Groups above): an instance has a token for each.
  [[nodiscard]] std::uint32_t groups() const noexcept { return groups_; }
  // The ops that wait for nothing (no variable, no predecessor): ready at every replay.
  [[nodiscard]] const std::vector<std::uint32_t>& roots() const noexcept { return roots_; }
  // The ops that count a replay down (see Retirement above): sinks and async ops.
  [[nodiscard]] std::size_t retirers() const noexcept { return retirers_; }
  // The scope of each op that has one (a scope once per such op): what a replay counts in.
  [[nodiscard]] const std::vector<ScopeState*>& scoped() const noexcept { return scoped_; }
  // Which replay this is, from 0. Taken under the variables' locks (a graph without variables: in no particular
  // order).
  [[nodiscard]] std::int64_t next_replay() noexcept {
    // relaxed: a count; replays order among themselves through their variables' locks.
    return replays_.fetch_add(1, std::memory_order_relaxed);
  }

  // A free instance, made (allocating) when none is. Any thread.
  [[nodiscard]] GraphInstance* take();
  // Returns an instance whose every op has retired. Any thread.
  void give_back(GraphInstance* instance) noexcept;
  // Destroys the ops' functions (and what they hold), with no replay in flight: the engine is being destroyed
  // (graph_lifetime.h).
  void drop_functions() noexcept;

 private:
  const std::uint32_t engine_id_;
  std::vector<Op> ops_;
  std::vector<OpName> names_;  // op i's name, if it has one (Op::named)
  std::vector<Use> uses_;
  std::vector<std::uint32_t> successors_;
  std::vector<std::uint32_t> covered_;
  std::vector<Relay> relays_;
  std::vector<Join> joins_;  // sorted by variable address; a variable's head, middle and tail in that order
  std::vector<std::uint32_t> targets_;
  std::vector<std::uint32_t> tokens_;
  std::uint32_t groups_ = 0;
  std::vector<std::uint32_t> roots_;
  std::vector<ScopeState*> scoped_;  // see scoped(); the ops' ScopeHolds keep them alive
  std::size_t retirers_ = 0;
  std::atomic<std::int64_t> replays_{0};

  std::mutex pool_mutex_;
  std::vector<std::unique_ptr<GraphInstance>> instances_;  // guarded by pool_mutex_; every instance made
  std::vector<GraphInstance*> free_;                       // guarded by pool_mutex_
};

// The token of a group of accumulations in one replay (see Groups above). Guarded by `lock`, which only the group's
// members take, as they start and as they complete; free (holder null, nobody parked) between replays.
struct GroupToken {
  support::Spinlock lock;
  GraphOp* holder = nullptr;  // the member running on the variable (or handed the token), or null
  TaskList parked;            // members ready but for the token, in the order they asked for it, holding none
};

// The state of one replay: an op per planned op, a join per planned join, a relay per planned relay and a token per
// group, reused by later replays.
class GraphInstance {
 public:
  explicit GraphInstance(GraphPlan& plan);

  GraphPlan& plan;
  std::unique_ptr<GraphOp[]> ops;
  std::unique_ptr<GraphJoin[]> joins;
  std::unique_ptr<GraphRelay[]> relays;
  std::unique_ptr<GroupToken[]> tokens;
  // Set by the replaying thread before the ops can run; read by them.
  std::shared_ptr<GraphPlan> keep;  // the plan stays alive while the replay is in flight
  std::int64_t replay = 0;          // RunContext::replay
  std::uint64_t owner = 0;          // the replaying thread (error_log.h), whose ops these are
  std::uint64_t trace_ops = 0;      // traced: op i's trace id is trace_ops + i (TraceRecorder::next_ops); 0: not
  // On an engine with observers (observers.h): op i's id and times; made at the instance's first observed replay.
  std::unique_ptr<ObservedOp[]> observed;
  // ReplayOptions::scope's state: every op of this replay belongs to it instead of its captured scope; null: none.
  // Each op holds a reference to it (ScopeState::op_pushed) until it retires.
  ScopeState* scope = nullptr;
  // Ops, and joins not granted at append, that are not done yet; whoever takes it to zero frees the instance.
  alignas(support::kCacheLine) std::atomic<std::uint32_t> remaining{0};
};

}  // namespace depengine::detail
