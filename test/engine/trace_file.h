// Reads a trace the engine wrote (engine/detail/trace_recorder.h) with nlohmann::json, and indexes what the tests
// check: lanes, op slices by op id, flow arrows paired by id, and counter samples.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace depengine::test {

struct TraceFile {
  struct Slice {
    std::string name;
    int tid = 0;
    double ts = 0, dur = 0;
    std::string reads, mutates;
    // Why it waited (trace_recorder.h): "waited on" in words, wait_kind, and the op that held it (0: none).
    std::string waited_on, wait_kind;
    std::uint64_t waited_for_op = 0;
  };
  struct Flow {
    std::string name;                // how the dependency was kept: release, device wait, elided, host wait
    std::uint64_t from = 0, to = 0;  // op ids
    int from_tid = 0, to_tid = 0;
    double from_ts = 0, to_ts = 0;
  };
  std::map<int, std::string> lanes;             // tid -> name
  std::map<std::uint64_t, Slice> slices;        // op id -> its slice
  std::vector<Flow> flows;                      // complete pairs only
  std::map<std::string, std::size_t> counters;  // counter name -> samples
  // The ops a stall report found in flight: instant events of category "in flight", named after the op, with what it
  // was doing then.
  struct InFlightMark {
    std::string name, state;
    int tid = 0;
  };
  std::vector<InFlightMark> in_flight;
  // The critical path's slices (its lane, "cat":"critical path"): what each step is, in order, and its op.
  struct PathStep {
    std::string name, step;
    std::uint64_t op = 0;
    double ts = 0, dur = 0;
  };
  std::vector<PathStep> critical_path;
  std::string critical_path_text;  // otherData's "critical path"
};

// Parses `path` (failing the test if it is not a JSON object with a traceEvents array) and indexes it.
inline TraceFile read_trace(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  const nlohmann::json json = nlohmann::json::parse(in);  // throws (failing the test) on malformed JSON
  REQUIRE(json.is_object());
  REQUIRE(json.at("traceEvents").is_array());
  TraceFile trace;
  std::map<std::uint64_t, TraceFile::Flow> open;  // flow id -> its start
  for (const nlohmann::json& event : json.at("traceEvents")) {
    const std::string ph = event.at("ph");
    if (ph == "M" && event.at("name") == "thread_name") {
      trace.lanes[event.at("tid").get<int>()] = event.at("args").at("name").get<std::string>();
    } else if (ph == "X" && event.at("cat") == "critical path") {
      trace.critical_path.push_back(TraceFile::PathStep{event.at("name"), event.at("args").at("step"),
                                                        event.at("args").at("op"), event.at("ts"), event.at("dur")});
    } else if (ph == "X") {
      const nlohmann::json& args = event.at("args");
      const std::uint64_t op = args.at("op");
      const bool fresh = trace.slices
                             .emplace(op, TraceFile::Slice{event.at("name"), event.at("tid"), event.at("ts"),
                                                           event.at("dur"), args.at("reads"), args.at("mutates"),
                                                           args.value("waited on", std::string()),
                                                           args.value("wait_kind", std::string()),
                                                           args.value("waited_for_op", std::uint64_t{0})})
                             .second;
      CHECK(fresh);  // one slice per op
    } else if (ph == "s") {
      open[event.at("id")] = TraceFile::Flow{event.at("name"),
                                             event.at("args").at("from"),
                                             event.at("args").at("to"),
                                             event.at("tid"),
                                             0,
                                             event.at("ts"),
                                             0};
    } else if (ph == "f") {
      TraceFile::Flow flow = open.at(event.at("id"));  // a finish always follows its start
      CHECK(event.at("args").at("to").get<std::uint64_t>() == flow.to);
      CHECK(event.at("name").get<std::string>() == flow.name);
      flow.to_tid = event.at("tid");
      flow.to_ts = event.at("ts");
      trace.flows.push_back(flow);
    } else if (ph == "C") {
      ++trace.counters[event.at("name").get<std::string>()];
    } else if (ph == "i" && event.at("cat") == "in flight") {
      trace.in_flight.push_back(
          TraceFile::InFlightMark{event.at("name"), event.at("args").at("state"), event.at("tid")});
    }
  }
  if (json.contains("otherData")) trace.critical_path_text = json.at("otherData").value("critical path", "");
  return trace;
}

// The trace's arrows as (from, to) pairs of slice names, sorted; every arrow must join two op slices.
inline std::vector<std::pair<std::string, std::string>> named_arrows(const TraceFile& trace) {
  std::vector<std::pair<std::string, std::string>> arrows;
  for (const TraceFile::Flow& flow : trace.flows) {
    REQUIRE(trace.slices.count(flow.from) == 1);
    REQUIRE(trace.slices.count(flow.to) == 1);
    arrows.emplace_back(trace.slices.at(flow.from).name, trace.slices.at(flow.to).name);
  }
  std::sort(arrows.begin(), arrows.end());
  return arrows;
}

// A path in the test's temporary directory, unique to this process and call.
inline std::string temporary_trace_path(const std::string& stem) {
  static std::atomic<int> calls{0};
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/depengine-" + stem + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(calls.fetch_add(1, std::memory_order_relaxed) + 1) + ".json";
}

}  // namespace depengine::test
