// Traces (engine.h, "Traces"): the file is JSON in the Chrome trace-event format, with a slice per op that names its
// variables, and one arrow into every op that waited for another, from the op whose completion released it. Runs on
// every executor.
#include <catch2/catch.hpp>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <depengine/engine/engine.h>
#include <depengine/frontier/timeline.h>

#include "test/engine/test_support.h"
#include "test/engine/trace_file.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {
namespace {

// "v<slot>" (a variable made by a fresh engine's n-th NewVariable has slot n).
std::string label(int slot) {
  std::string out = std::to_string(slot);
  out.insert(out.begin(), 'v');
  return out;
}

std::set<std::string> labels(const std::string& text) {
  std::istringstream in(text);
  std::set<std::string> out;
  for (std::string label; in >> label;) out.insert(label);
  return out;
}

TEST_CASE("a trace has a slice per op with its variables and one arrow into each op from an op it waited for",
          "[engine][trace]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      for (const std::uint64_t seed : test_seeds()) {
        CAPTURE(seed);
        Watchdog watchdog("trace of a random graph on " + factory.name);
        std::mt19937_64 rng(seed);
        constexpr int kVars = 6;
        const int ops = static_cast<int>(sized(300, 100, 100));
        const std::string path = temporary_trace_path("graph");
        Engine engine(factory.options());
        std::vector<Var> vars;
        for (int v = 0; v < kVars; ++v) vars.push_back(engine.NewVariable());  // slots 0 .. kVars-1: "v0" ...
        engine.StartTrace(path);
        // Op 0 holds every variable until every op is pushed, so every later op waits for something.
        HeldOp gate(engine, {}, vars, {.name = "gate"});
        struct Pushed {
          std::set<int> reads, mutates;
        };
        std::vector<Pushed> pushed{{{}, {0, 1, 2, 3, 4, 5}}};
        std::vector<std::string> names{"gate"};
        names.reserve(static_cast<std::size_t>(ops) + 1);
        for (int i = 1; i <= ops; ++i) {
          Pushed op;
          const int uses = 1 + static_cast<int>(rng() % 3);
          for (int u = 0; u < uses; ++u) {
            const int v = static_cast<int>(rng() % kVars);
            if (rng() % 2 == 0) {
              op.mutates.insert(v);
            } else {
              op.reads.insert(v);
            }
          }
          for (const int v : op.mutates) op.reads.erase(v);  // a variable both read and mutated counts as mutated
          std::vector<Var> reads, mutates;
          for (const int v : op.reads) reads.push_back(vars[static_cast<std::size_t>(v)]);
          for (const int v : op.mutates) mutates.push_back(vars[static_cast<std::size_t>(v)]);
          names.push_back("op " + std::to_string(i));
          engine.Push([] {}, reads, mutates, {.name = names.back()});
          pushed.push_back(op);
        }
        REQUIRE(gate.release());
        engine.StopTrace();
        const TraceFile trace = read_trace(path);
        std::remove(path.c_str());

        // Ops get increasing ids in push order: the gate has the smallest.
        REQUIRE(trace.slices.size() == pushed.size());
        std::vector<std::uint64_t> ids;
        for (const auto& [id, slice] : trace.slices) ids.push_back(id);
        auto index_of = [&](std::uint64_t id) {
          return static_cast<std::size_t>(std::lower_bound(ids.begin(), ids.end(), id) - ids.begin());
        };
        for (std::size_t i = 0; i < pushed.size(); ++i) {
          const TraceFile::Slice& slice = trace.slices.at(ids[i]);
          CAPTURE(i);
          CHECK(slice.name == names[i]);
          CHECK(slice.dur >= 0);
          CHECK(trace.lanes.count(slice.tid) == 1);  // every lane is named
          std::set<std::string> reads, mutates;
          for (const int v : pushed[i].reads) reads.insert(label(v));
          for (const int v : pushed[i].mutates) mutates.insert(label(v));
          CHECK(labels(slice.reads) == reads);
          CHECK(labels(slice.mutates) == mutates);
        }
        // An arrow into every op but the gate, from an earlier op it depends on (they share a variable that one of
        // them mutates), drawn from inside that op's slice to the start of the released one: one (the op that
        // released it) on a CPU executor; on a stream executor one per stream op it was ordered after directly, which
        // can be several.
        std::vector<int> incoming(pushed.size(), 0);
        for (const TraceFile::Flow& flow : trace.flows) {
          const std::size_t from = index_of(flow.from), to = index_of(flow.to);
          CAPTURE(from, to);
          REQUIRE(to < pushed.size());
          ++incoming[to];
          bool depends = false;
          for (const int v : pushed[to].mutates)
            depends |= pushed[from].reads.count(v) + pushed[from].mutates.count(v) > 0;
          for (const int v : pushed[to].reads) depends |= pushed[from].mutates.count(v) > 0;
          CHECK(from < to);
          CHECK(depends);
          const TraceFile::Slice& source = trace.slices.at(flow.from);
          const TraceFile::Slice& target = trace.slices.at(flow.to);
          CHECK(flow.from_tid == source.tid);
          CHECK(flow.from_ts >= source.ts);
          CHECK(flow.from_ts <= source.ts + source.dur + 0.002);  // the file rounds to nanoseconds
          CHECK(flow.to_tid == target.tid);
          CHECK(flow.to_ts == target.ts);
        }
        CHECK(incoming[0] == 0);
        const bool streams = engine.executor(0).issues_ahead();
        for (std::size_t i = 1; i < pushed.size(); ++i) {
          CAPTURE(i);
          if (streams) {
            CHECK(incoming[i] >= 1);
          } else {
            CHECK(incoming[i] == 1);
          }
        }
        CHECK(trace.counters.at("ops in flight") == pushed.size());
        if (engine.executor(0).issues_ahead()) {
          // Each op of a stream executor samples the device waits as it completes (engine_core.cpp, trace_stream_op).
          CHECK(trace.counters.at("device waits") == pushed.size());
        } else {
          CHECK(trace.counters.count("device waits") == 0);  // CPU ops have none
        }
      }
    }
  }
}

TEST_CASE("DEPENGINE_TRACE traces every engine made while it is set, later ones of one path to path.2, path.3",
          "[engine][trace]") {
  const std::string path = temporary_trace_path("env");
  REQUIRE(::setenv("DEPENGINE_TRACE", path.c_str(), 1) == 0);
  for (int engines = 0; engines < 2; ++engines) {
    Engine engine(executor_factories().front().options());
    const Var x = engine.NewVariable();
    HeldOp gate(engine, {}, {x});
    for (int i = 0; i < 9; ++i) engine.Push([] {}, {}, {x});
    REQUIRE(gate.release());
  }  // each engine writes its file as it is destroyed
  REQUIRE(::unsetenv("DEPENGINE_TRACE") == 0);
  for (const std::string& file : {path, path + ".2"}) {
    CAPTURE(file);
    const TraceFile trace = read_trace(file);
    CHECK(trace.slices.size() == 10);
    CHECK(trace.flows.size() == 9);                                          // a chain on x: each op released the next
    for (const auto& [id, slice] : trace.slices) CHECK(slice.name == "op");  // unnamed ops
    std::remove(file.c_str());
  }
  Engine untraced(executor_factories().front().options());
  CHECK_THROWS_WITH(untraced.StopTrace(), Catch::Contains("no trace is on"));
}

TEST_CASE("an op's name built at run time is its own: RunContext and the trace see it after the string is gone",
          "[engine][trace]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Engine engine(factory.options());
      const std::string path = temporary_trace_path("names");
      engine.StartTrace(path);
      Var v = engine.NewVariable();
      constexpr int kOps = 8;
      const std::string long_tail(2 * OpName::kInlineChars, 'x');  // past the inline size: a heap copy
      std::vector<std::string> seen(kOps);
      for (int i = 0; i < kOps; ++i) {
        // The temporary string dies at the end of this statement, before the op runs on most executors.
        engine.Push([&seen, i](const RunContext& ctx) { seen[static_cast<std::size_t>(i)] = std::string(ctx.name); },
                    {}, {v}, {.name = "backward " + std::to_string(i) + (i % 2 == 1 ? long_tail : "")});
      }
      engine.Push([] {}, {}, {v});  // unnamed
      engine.StopTrace();
      const TraceFile trace = read_trace(path);
      std::remove(path.c_str());
      std::vector<std::string> traced;
      for (const auto& [id, slice] : trace.slices) traced.push_back(slice.name);
      REQUIRE(traced.size() == kOps + 1);
      for (int i = 0; i < kOps; ++i) {
        const std::string expected = "backward " + std::to_string(i) + (i % 2 == 1 ? long_tail : "");
        CHECK(seen[static_cast<std::size_t>(i)] == expected);
        CHECK(traced[static_cast<std::size_t>(i)] == expected);  // slices by op id, which follows push order
      }
      CHECK(traced.back() == "op");
    }
  }
}

TEST_CASE("FlushTrace writes what has run so far and recording goes on", "[engine][trace]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Engine engine(factory.options());
      CHECK_THROWS_WITH(engine.FlushTrace(), Catch::Contains("FlushTrace: no trace is on"));
      const std::string path = temporary_trace_path("flush");
      engine.StartTrace(path);
      const Var x = engine.NewVariable();
      for (int i = 0; i < 3; ++i) engine.Push([] {}, {}, {x});
      engine.WaitForAll();
      engine.FlushTrace();
      CHECK(read_trace(path).slices.size() == 3);
      // From inside an op: the file then holds the ops finished before it (not the op itself, still running).
      std::size_t seen_inside = 0;
      engine.Push(
          [&] {
            engine.FlushTrace();
            seen_inside = read_trace(path).slices.size();
          },
          {}, {x});
      engine.WaitForAll();
      CHECK(seen_inside == 3);
      engine.StopTrace();
      CHECK(read_trace(path).slices.size() == 4);
      CHECK_THROWS_WITH(engine.FlushTrace(), Catch::Contains("no trace is on"));
      std::remove(path.c_str());
    }
  }
}

TEST_CASE("a stall report writes the trace so far, so a stuck run leaves one", "[engine][trace][report]") {
  Watchdog watchdog("stall report with a trace");
  std::mutex mutex;
  std::string reports;  // guarded by mutex
  EngineOptions options = executor_factories().front().options();
  options.stall_report_after = std::chrono::milliseconds(20);
  options.stall_sink = [&](std::string_view report) {
    std::lock_guard lock(mutex);
    reports += report;
  };
  Engine engine(std::move(options));
  const std::string path = temporary_trace_path("stall");
  engine.StartTrace(path);
  const Var x = engine.NewVariable();
  engine.Push([] {}, {}, {x}, {.name = "before 1"});
  engine.Push([] {}, {}, {x}, {.name = "before 2"});
  engine.WaitForVar(x);
  Timeline t;
  engine.Push([] {}, {}, {x}, {.name = "stuck", .wait_fences = {{&t, 1}}});  // never runs until t reaches 1
  REQUIRE(wait_until([&] {
    std::lock_guard lock(mutex);
    return !reports.empty();
  }));
  {
    std::lock_guard lock(mutex);
    CHECK_THAT(reports, Catch::Contains("the trace so far is in " + path));
  }
  const TraceFile partial = read_trace(path);
  REQUIRE(partial.slices.size() == 2);
  std::set<std::string> names;
  for (const auto& [op, slice] : partial.slices) names.insert(slice.name);
  CHECK(names == std::set<std::string>{"before 1", "before 2"});
  t.signal_external(1);
  engine.StopTrace();
  CHECK(read_trace(path).slices.size() == 3);
  std::remove(path.c_str());
}

// Issue 48: the trace a stall report wrote showed only the ops that had finished, so the ops the report named were not
// in it. They are now marks at the moment of writing, on a lane of their own, each saying what the op was doing.
TEST_CASE("the trace written at a stall marks the ops still in flight", "[engine][trace][report]") {
  Watchdog watchdog("in-flight ops in a stall trace");
  std::mutex mutex;
  std::condition_variable reported;
  std::string reports;  // guarded by mutex
  EngineOptions options = executor_factories().front().options();
  options.stall_report_after = std::chrono::milliseconds(20);
  options.stall_sink = [&](std::string_view report) {
    {
      std::lock_guard lock(mutex);
      reports += report;
    }
    reported.notify_all();
  };
  Engine engine(std::move(options));
  const std::string path = temporary_trace_path("stall-in-flight");
  engine.StartTrace(path);
  const Var x = engine.NewVariable();
  engine.Push([] {}, {}, {x}, {.name = "done"});
  Timeline t;
  engine.Push([] {}, {}, {x}, {.name = "stuck", .wait_fences = {{&t, 1}}});
  engine.Push([] {}, {x}, {}, {.name = "behind"});
  {
    std::unique_lock lock(mutex);
    CHECK(reported.wait_for(lock, meet_limit(), [&] { return !reports.empty(); }));
  }
  const TraceFile partial = read_trace(path);
  CHECK(partial.slices.size() == 1);         // "done"
  std::map<std::string, std::string> marks;  // op -> state
  for (const TraceFile::InFlightMark& mark : partial.in_flight) {
    marks[mark.name] = mark.state;
    CHECK(partial.lanes.at(mark.tid) == "in flight at stall");
  }
  CAPTURE(marks);
  // CHECK, not REQUIRE, until the fence is signalled: the engine outlives t only if the test goes on.
  CHECK_THAT(marks["op #1 'stuck'"], Catch::Contains("holds v0 (write)") && Catch::Contains("waits for fence"));
  CHECK_THAT(marks["op #2 'behind'"], Catch::Contains("waits on v0 behind op #1 'stuck'"));
  t.signal_external(1);
  engine.StopTrace();
  const TraceFile final_trace = read_trace(path);
  CHECK(final_trace.slices.size() == 3);
  CHECK(final_trace.in_flight.empty());  // the marks belong to the write at the stall alone
  std::remove(path.c_str());
}

TEST_CASE("trace misuse gets clear errors", "[engine][trace][errors]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Engine engine(factory.options());
      CHECK_THROWS_WITH(engine.StopTrace(), Catch::Contains("StopTrace: no trace is on"));
      const std::string path = temporary_trace_path("misuse");
      engine.StartTrace(path);
      CHECK_THROWS_WITH(engine.StartTrace(path), Catch::Contains("already on"));
      const Var x = engine.NewVariable();
      engine.Push([&] { CHECK_THROWS_WITH(engine.StopTrace(), Catch::Contains("StopTrace")); }, {}, {x});
      engine.StopTrace();
      CHECK(read_trace(path).slices.size() == 1);
      std::remove(path.c_str());
      engine.StartTrace("/nonexistent-directory/trace.json");
      engine.Push([] {}, {}, {x});
      CHECK_THROWS_WITH(engine.StopTrace(), Catch::Contains("/nonexistent-directory/trace.json"));
      engine.StartTrace(path);  // the failed trace is off: a new one may start
      engine.StopTrace();
      CHECK(read_trace(path).slices.empty());
      std::remove(path.c_str());
    }
  }
}

}  // namespace
}  // namespace depengine::test
