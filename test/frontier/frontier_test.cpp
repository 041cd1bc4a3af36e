// Tests of the two frontier roles (frontier/frontier.h): the laws, checked over random frontiers against a
// reference model (a std::map from axis to epoch); overflow and taint on both sides; the frontier scenarios of the
// note "Causal Dependency Tracking with Vector Clock Frontiers" (IREE's design), are in frontier_scenarios_test.cpp;
// here also the compile-time separation of the roles.
//
// Randomized tests run with DEPENGINE_TEST_SEED (one fixed seed, to rerun a failure) or DEPENGINE_TEST_REPEAT fresh
// seeds (default 3), the convention of test/test_support.h, and CAPTURE the seed.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <random>
#include <set>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <depengine/frontier/frontier.h>

#include "test/test_support.h"

namespace depengine {
namespace {

// ---- seeds and the reference model -------------------------------------------------------------------------------

using test::test_seeds;  // DEPENGINE_TEST_SEED / DEPENGINE_TEST_REPEAT (test/test_support.h)

// What a frontier means, without its representation: the epoch recorded for each axis.
using Model = std::map<Axis, std::uint64_t>;

template <class Frontier>
Model model_of(const Frontier& frontier) {
  Model model;
  for (const FrontierEntry& e : frontier) model[e.axis] = e.epoch;
  return model;
}

Model model_merge(Model a, const Model& b) {
  for (const auto& [axis, epoch] : b) a[axis] = std::max(a[axis], epoch);
  return a;
}

// Every entry of `target` has its axis in `reference` with an epoch at least as large.
bool model_covers(const Model& reference, const Model& target) {
  return std::all_of(target.begin(), target.end(), [&](const auto& entry) {
    const auto it = reference.find(entry.first);
    return it != reference.end() && it->second >= entry.second;
  });
}

Model model_uncovered(const Model& reference, const Model& target) {
  Model out;
  for (const auto& [axis, epoch] : target) {
    if (!model_covers(reference, Model{{axis, epoch}})) out[axis] = epoch;
  }
  return out;
}

// The text of a model, in the frontiers' own format, so that a failed comparison prints both sides readably.
std::string text(const Model& model) {
  std::string out = "{";
  for (const auto& [axis, epoch] : model)
    out += (out.size() > 1 ? ", " : "") + to_string(axis) + ":" + std::to_string(epoch);
  return out + "}";
}
template <class Frontier>
std::string text(const Frontier& frontier) {
  return text(model_of(frontier));
}

FrontierOrder expected_order(bool a_dominates_b, bool b_dominates_a) {
  if (a_dominates_b) return b_dominates_a ? FrontierOrder::kEqual : FrontierOrder::kAfter;
  return b_dominates_a ? FrontierOrder::kBefore : FrontierOrder::kConcurrent;
}

// Random models over a small universe of axes, so that frontiers share axes often, and small epochs, so that equal
// epochs are common. The universe spreads over incarnations, machines and domains, so sorting crosses every field.
class Generator {
 public:
  Generator(std::uint64_t seed, std::size_t universe_size) : rng_(seed) {
    std::set<Axis> axes;
    while (axes.size() < universe_size) {
      axes.insert(Axis::make(static_cast<std::uint8_t>(pick(0, 1)), static_cast<std::uint8_t>(pick(0, 2)),
                             static_cast<AxisDomain>(pick(0, kAxisDomainCount - 1)), pick(1, 4 * universe_size)));
    }
    universe_.assign(axes.begin(), axes.end());
  }

  std::uint64_t pick(std::uint64_t low, std::uint64_t high) {
    return std::uniform_int_distribution<std::uint64_t>(low, high)(rng_);
  }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  Axis any_axis() { return universe_[pick(0, universe_.size() - 1)]; }
  const std::vector<Axis>& universe() const { return universe_; }

  // A model holding each axis of the universe with one density (from sparse to full), epochs 1..4.
  Model random() {
    static constexpr double kDensities[] = {0.1, 0.5, 0.9, 1.0};
    const double density = kDensities[pick(0, 3)];
    Model model;
    for (const Axis axis : universe_) {
      if (chance(density)) model[axis] = pick(1, 4);
    }
    return model;
  }

  // A model related to `base` so that every order (equal, before, after, concurrent) shows up even at 64 entries,
  // where two independent random models are almost never ordered.
  Model related(const Model& base) {
    Model model = base;
    switch (pick(0, 4)) {
      case 0:  // equal
        break;
      case 1:  // knows less: entries dropped or lowered
        for (auto it = model.begin(); it != model.end();) {
          if (chance(0.3) && it->second > 1) {
            --it->second;
          } else if (chance(0.2)) {
            it = model.erase(it);
            continue;
          }
          ++it;
        }
        break;
      case 2:  // knows more: entries raised or added
        for (const Axis axis : universe_) {
          if (chance(0.3)) model[axis] += pick(1, 2);
        }
        break;
      case 3:  // one entry ahead, another behind or missing: usually concurrent
        model[any_axis()] += 1;
        model.erase(any_axis());
        break;
      default:
        model = random();
        break;
    }
    return model;
  }

  // The entries of `model` as a caller might hand them over: shuffled, with repeated axes at lower epochs and zero
  // epochs mixed in, which the constructors must sort, collapse and skip.
  std::vector<FrontierEntry> scrambled(const Model& model) {
    std::vector<FrontierEntry> entries;
    for (const auto& [axis, epoch] : model) {
      entries.push_back({axis, epoch});
      if (chance(0.2)) entries.push_back({axis, pick(0, epoch)});
    }
    if (chance(0.5)) entries.push_back({any_axis(), 0});
    std::shuffle(entries.begin(), entries.end(), rng_);
    return entries;
  }

  template <class Frontier>
  Frontier build(const Model& model) {
    const std::vector<FrontierEntry> entries = scrambled(model);
    return Frontier(std::span<const FrontierEntry>(entries));
  }

 private:
  std::mt19937_64 rng_;
  std::vector<Axis> universe_;
};

// Checks the representation invariants (sorted, no zero epoch) and that no overflow happened.
template <class Frontier>
void require_valid_untainted(const Frontier& frontier) {
  INFO(to_string(frontier));
  REQUIRE_NOTHROW(frontier.validate());
  REQUIRE_FALSE(frontier.tainted());
}

// ---- the laws, over random frontiers ------------------------------------------------------------------------------
// The universe has as many axes as the capacity, so nothing overflows and the laws must hold exactly.

constexpr int kLawRounds = 300;

TEMPLATE_TEST_CASE_SIG(
    "Frontiers built from entries in any order are sorted, keep each axis's largest epoch and "
    "skip zero epochs",
    "[frontier][laws]", ((std::size_t N), N), 4, 16, 64) {
  for (const std::uint64_t seed : test_seeds()) {
    CAPTURE(seed);
    Generator gen(seed, N);
    for (int round = 0; round < kLawRounds; ++round) {
      const Model model = gen.random();
      const auto known = gen.build<KnowledgeFrontier<N>>(model);
      const auto required = gen.build<RequirementFrontier<N>>(model);
      require_valid_untainted(known);
      require_valid_untainted(required);
      REQUIRE(text(known) == text(model));
      REQUIRE(text(required) == text(model));
      for (const Axis axis : gen.universe()) {
        const auto it = model.find(axis);
        REQUIRE(known.epoch(axis) == (it == model.end() ? 0 : it->second));
      }
    }
  }
}

TEMPLATE_TEST_CASE_SIG(
    "merge is the component-wise maximum, dominates both inputs, and is associative, commutative "
    "and idempotent in both roles",
    "[frontier][laws]", ((std::size_t N), N), 4, 16, 64) {
  for (const std::uint64_t seed : test_seeds()) {
    CAPTURE(seed);
    Generator gen(seed, N);
    for (int round = 0; round < kLawRounds; ++round) {
      const Model ma = gen.random();
      const Model mb = gen.related(ma);
      const Model mc = gen.related(gen.chance(0.5) ? ma : mb);
      const auto ka = gen.build<KnowledgeFrontier<N>>(ma);
      const auto kb = gen.build<KnowledgeFrontier<N>>(mb);
      const auto kc = gen.build<KnowledgeFrontier<N>>(mc);
      const auto ra = gen.build<RequirementFrontier<N>>(ma);
      const auto rb = gen.build<RequirementFrontier<N>>(mb);
      const auto rc = gen.build<RequirementFrontier<N>>(mc);

      const KnowledgeFrontier<N> k = merged(ka, kb);
      const RequirementFrontier<N> r = merged(ra, rb);
      require_valid_untainted(k);
      require_valid_untainted(r);
      REQUIRE(text(k) == text(model_merge(ma, mb)));
      REQUIRE(text(r) == text(k));
      REQUIRE((dominates(k, ka) && dominates(k, kb)));
      REQUIRE((dominates(r, ra) && dominates(r, rb)));
      REQUIRE((dominates(k, ra) && dominates(k, rb)));  // knowing the merge satisfies both requirements

      REQUIRE(merged(merged(ka, kb), kc) == merged(ka, merged(kb, kc)));
      REQUIRE(merged(merged(ra, rb), rc) == merged(ra, merged(rb, rc)));
      REQUIRE(merged(kb, ka) == k);
      REQUIRE(merged(rb, ra) == r);
      REQUIRE(merged(ka, ka) == ka);
      REQUIRE(merged(ra, ra) == ra);
      // Merging a frontier into itself reads and writes the same entries: it must still be a no-op.
      KnowledgeFrontier<N> self = ka;
      self.merge(self);
      REQUIRE(self == ka);
    }
  }
}

TEMPLATE_TEST_CASE_SIG("dominates matches the reference model, and compare agrees with dominates in both directions",
                       "[frontier][laws]", ((std::size_t N), N), 4, 16, 64) {
  std::array<int, 4> seen{};  // how often each FrontierOrder came up, to show the generator reaches all four
  for (const std::uint64_t seed : test_seeds()) {
    CAPTURE(seed);
    Generator gen(seed, N);
    for (int round = 0; round < kLawRounds; ++round) {
      const Model ma = gen.random();
      const Model mb = gen.related(ma);
      const auto ka = gen.build<KnowledgeFrontier<N>>(ma);
      const auto kb = gen.build<KnowledgeFrontier<N>>(mb);
      const auto ra = gen.build<RequirementFrontier<N>>(ma);
      const auto rb = gen.build<RequirementFrontier<N>>(mb);
      INFO("a = " << ka << ", b = " << kb);
      const bool a_dom_b = model_covers(ma, mb);
      const bool b_dom_a = model_covers(mb, ma);

      REQUIRE(dominates(ka, kb) == a_dom_b);
      REQUIRE(dominates(kb, ka) == b_dom_a);
      REQUIRE(dominates(ka, rb) == a_dom_b);
      REQUIRE(dominates(kb, ra) == b_dom_a);
      REQUIRE(dominates(ra, rb) == a_dom_b);
      REQUIRE(dominates(rb, ra) == b_dom_a);

      const FrontierOrder k_order = compare(ka, kb);
      REQUIRE((k_order == FrontierOrder::kAfter) == (dominates(ka, kb) && !dominates(kb, ka)));
      REQUIRE((k_order == FrontierOrder::kBefore) == (dominates(kb, ka) && !dominates(ka, kb)));
      REQUIRE((k_order == FrontierOrder::kEqual) == (dominates(ka, kb) && dominates(kb, ka)));
      REQUIRE((k_order == FrontierOrder::kConcurrent) == (!dominates(ka, kb) && !dominates(kb, ka)));
      REQUIRE(compare(kb, ka) == expected_order(b_dom_a, a_dom_b));
      REQUIRE(compare(ra, rb) == k_order);
      REQUIRE(compare(rb, ra) == compare(kb, ka));
      // Equal frontiers are exactly the equal models.
      REQUIRE((k_order == FrontierOrder::kEqual) == (ma == mb));
      ++seen[static_cast<std::size_t>(k_order)];
    }
  }
  CAPTURE(seen[0], seen[1], seen[2], seen[3]);
  REQUIRE(std::all_of(seen.begin(), seen.end(), [](int n) { return n > 0; }));
}

TEMPLATE_TEST_CASE_SIG(
    "undominated lists exactly the target entries the reference does not cover, and is empty "
    "exactly when the reference dominates the target",
    "[frontier][laws]", ((std::size_t N), N), 4, 16, 64) {
  for (const std::uint64_t seed : test_seeds()) {
    CAPTURE(seed);
    Generator gen(seed, N);
    for (int round = 0; round < kLawRounds; ++round) {
      const Model reference_model = gen.random();
      const Model target_model = gen.related(reference_model);
      const auto reference = gen.build<KnowledgeFrontier<N>>(reference_model);
      const auto target = gen.build<RequirementFrontier<N>>(target_model);
      INFO("reference = " << reference << ", target = " << target);

      const RequirementFrontier<N> missing = undominated(reference, target);
      require_valid_untainted(missing);
      REQUIRE(text(missing) == text(model_uncovered(reference_model, target_model)));
      REQUIRE(missing.empty() == dominates(reference, target));
      REQUIRE(dominates(KnowledgeFrontier<1>{}, missing) == dominates(reference, target));
      // After waiting for exactly the missing entries, the target is satisfied.
      KnowledgeFrontier<N> after = reference;
      after.merge_satisfied(missing);
      REQUIRE(dominates(after, target));
    }
  }
}

TEMPLATE_TEST_CASE_SIG("insert_or_raise only ever raises an axis's epoch, to the largest epoch inserted",
                       "[frontier][laws]", ((std::size_t N), N), 4, 16, 64) {
  for (const std::uint64_t seed : test_seeds()) {
    CAPTURE(seed);
    Generator gen(seed, N);
    KnowledgeFrontier<N> known;
    RequirementFrontier<N> required;
    Model model;
    for (int round = 0; round < 20 * kLawRounds; ++round) {
      const Axis axis = gen.any_axis();
      const std::uint64_t epoch = gen.pick(0, 8);  // 0 included: it must change nothing
      const std::uint64_t before = known.epoch(axis);
      known.insert_or_raise(axis, epoch);
      required.insert_or_raise(axis, epoch);
      if (epoch > 0) model[axis] = std::max(model[axis], epoch);
      CAPTURE(axis, epoch, before);
      REQUIRE(known.epoch(axis) == std::max(before, epoch));
      REQUIRE(required.epoch(axis) == known.epoch(axis));
      if (round % 64 == 0) {
        require_valid_untainted(known);
        require_valid_untainted(required);
        REQUIRE(text(known) == text(model));
        REQUIRE(text(required) == text(model));
      }
    }
  }
}

// ---- overflow and taint ------------------------------------------------------------------------------------------

Axis queue_axis(std::uint64_t ordinal) { return Axis::make(0, 0, AxisDomain::kQueue, ordinal); }

// A knowledge frontier as large as any test needs, knowing `axes` at an epoch no requirement reaches.
KnowledgeFrontier<64> knows_everything(std::initializer_list<Axis> axes) {
  KnowledgeFrontier<64> known;
  for (const Axis axis : axes) known.insert_or_raise(axis, std::uint64_t{1} << 62);
  for (std::uint64_t i = 1; i <= 32; ++i) known.insert_or_raise(Axis::make(0, 9, AxisDomain::kHost, i), 1);
  return known;
}

TEST_CASE("A merge of equal-sized frontiers whose axes part ways half-way is the full component-wise maximum",
          "[frontier]") {
  // The same-axes path raises entries until the axes differ, then the merge scan takes over from the raised entries.
  const Axis a = queue_axis(1), b = queue_axis(2), c = queue_axis(3), d = queue_axis(4);
  KnowledgeFrontier<4> known{{a, 1}, {b, 5}, {c, 1}};
  known.merge(KnowledgeFrontier<4>{{a, 3}, {b, 2}, {d, 4}});
  REQUIRE(text(known) == text(Model{{a, 3}, {b, 5}, {c, 1}, {d, 4}}));
  REQUIRE_FALSE(known.tainted());

  RequirementFrontier<3> required{{a, 1}, {b, 5}, {c, 1}};
  required.merge(RequirementFrontier<3>{{a, 3}, {b, 2}, {d, 4}});  // four axes: one is lost, c:1 the oldest
  REQUIRE(text(required) == text(Model{{a, 3}, {b, 5}, {d, 4}}));
  REQUIRE(required.tainted());
}

TEST_CASE("A full knowledge frontier given a new axis evicts its smallest epoch and is tainted", "[frontier][taint]") {
  const Axis a = queue_axis(1), b = queue_axis(2), c = queue_axis(3), d = queue_axis(4), e = queue_axis(5),
             f = queue_axis(6);
  KnowledgeFrontier<4> known{{a, 5}, {b, 3}, {c, 9}, {d, 7}};
  REQUIRE_FALSE(known.tainted());

  known.insert_or_raise(b, 4);  // raising a known axis needs no room: nothing is evicted
  REQUIRE_FALSE(known.tainted());
  REQUIRE(known == KnowledgeFrontier<4>{{a, 5}, {b, 4}, {c, 9}, {d, 7}});

  known.insert_or_raise(e, 8);
  REQUIRE(known.tainted());
  REQUIRE_NOTHROW(known.validate());
  REQUIRE(text(known) == text(Model{{a, 5}, {c, 9}, {d, 7}, {e, 8}}));  // b:4 was the smallest

  known.insert_or_raise(f, 1);  // the newcomer itself is the smallest: it is the one dropped
  REQUIRE(text(known) == text(Model{{a, 5}, {c, 9}, {d, 7}, {e, 8}}));
  REQUIRE(known.tainted());

  // A tainted frontier's recorded entries are still true, so dominance over them still holds.
  REQUIRE(dominates(known, RequirementFrontier<4>{{c, 9}, {e, 8}}));
  REQUIRE_FALSE(dominates(known, RequirementFrontier<4>{{b, 1}}));  // forgotten: the conservative answer

  // Merging a tainted frontier passes the taint on, even with room to spare: what it forgot, the result never learns.
  KnowledgeFrontier<64> roomy{{f, 2}};
  roomy.merge(known);
  REQUIRE(roomy.tainted());
  REQUIRE(text(roomy) == text(Model{{a, 5}, {c, 9}, {d, 7}, {e, 8}, {f, 2}}));

  known.clear();
  REQUIRE(known.empty());
  REQUIRE_FALSE(known.tainted());
}

TEST_CASE("An overflowing knowledge frontier knows a subset of the truth, so every dominance it reports is true",
          "[frontier][taint]") {
  for (const std::uint64_t seed : test_seeds()) {
    CAPTURE(seed);
    Generator gen(seed, 12);  // three times the capacity: merges and inserts overflow often
    for (int trial = 0; trial < 50; ++trial) {
      KnowledgeFrontier<4> known;
      Model truth;  // everything that has been learned, with no capacity
      for (int step = 0; step < 40; ++step) {
        if (gen.chance(0.5)) {
          const Axis axis = gen.any_axis();
          const std::uint64_t epoch = gen.pick(1, 20);
          known.insert_or_raise(axis, epoch);
          truth[axis] = std::max(truth[axis], epoch);
        } else {
          Model small;
          for (int i = 0; i < 3; ++i) small[gen.any_axis()] = gen.pick(1, 20);
          const KnowledgeFrontier<4> before = known;
          const auto other = gen.build<KnowledgeFrontier<4>>(small);
          known.merge(other);
          truth = model_merge(truth, small);
          // On overflow the merge keeps the newest entries: nothing kept is older than anything dropped.
          const Model full = model_merge(model_of(before), small);
          if (full.size() > 4) {
            REQUIRE(known.tainted());
            REQUIRE(known.size() == 4);
            const Model kept = model_of(known);
            std::uint64_t oldest_kept = ~std::uint64_t{0};
            for (const auto& [axis, epoch] : kept) oldest_kept = std::min(oldest_kept, epoch);
            for (const auto& [axis, epoch] : full) {
              if (kept.count(axis) == 0) REQUIRE(epoch <= oldest_kept);
            }
          }
        }
        INFO("known = " << known << ", truth = " << text(truth));
        REQUIRE_NOTHROW(known.validate());
        for (const FrontierEntry& entry : known) {
          REQUIRE(truth.count(entry.axis) == 1);
          REQUIRE(entry.epoch <= truth.at(entry.axis));
        }
        if (truth.size() > 4) REQUIRE(known.tainted());
        if (!known.tainted()) REQUIRE(text(known) == text(truth));

        Model wanted;
        for (int i = 0; i < 2; ++i) wanted[gen.any_axis()] = gen.pick(1, 20);
        if (dominates(known, gen.build<RequirementFrontier<4>>(wanted))) REQUIRE(model_covers(truth, wanted));
      }
    }
  }
}

TEST_CASE(
    "A requirement frontier that overflows on insert is tainted and no knowledge frontier dominates it, however "
    "much it knows",
    "[frontier][taint]") {
  const Axis a = queue_axis(1), b = queue_axis(2), c = queue_axis(3), d = queue_axis(4), e = queue_axis(5);
  RequirementFrontier<4> required{{a, 1}, {b, 1}, {c, 1}, {d, 1}};
  const KnowledgeFrontier<64> everything = knows_everything({a, b, c, d, e});
  REQUIRE(dominates(everything, required));

  required.insert_or_raise(e, 1);
  REQUIRE(required.tainted());
  REQUIRE_NOTHROW(required.validate());
  REQUIRE(required.size() == 4);
  REQUIRE_FALSE(dominates(everything, required));
  REQUIRE_FALSE(dominates(KnowledgeFrontier<4>(everything), required));
  // Requirement subsumption: even a requirement naming every axis far ahead cannot subsume a tainted one.
  REQUIRE_FALSE(dominates(RequirementFrontier<64>::from_knowledge(everything), required));
  // Copies stay tainted; only clear() starts afresh.
  const RequirementFrontier<4> copy = required;
  REQUIRE_FALSE(dominates(everything, copy));
  REQUIRE_FALSE(dominates(everything, RequirementFrontier<16>(required)));
  required.clear();
  REQUIRE_FALSE(required.tainted());
  REQUIRE(dominates(everything, required));

  // Narrowing to a smaller capacity that cannot hold the entries is an overflow too.
  const RequirementFrontier<16> wide{{a, 1}, {b, 1}, {c, 1}, {d, 1}, {e, 1}};
  REQUIRE_FALSE(wide.tainted());
  REQUIRE(RequirementFrontier<4>(wide).tainted());
  REQUIRE_FALSE(dominates(everything, RequirementFrontier<4>(wide)));
}

TEST_CASE("A requirement frontier that overflows during a merge is tainted and never dominated", "[frontier][taint]") {
  const Axis a = queue_axis(1), b = queue_axis(2), c = queue_axis(3), d = queue_axis(4), e = queue_axis(5);
  const KnowledgeFrontier<64> everything = knows_everything({a, b, c, d, e});
  const RequirementFrontier<4> left{{a, 2}, {b, 2}, {c, 2}};
  const RequirementFrontier<4> right{{c, 3}, {d, 3}, {e, 3}};

  RequirementFrontier<4> fits = left;
  fits.merge(RequirementFrontier<4>{{a, 5}, {d, 1}});  // four axes: fits exactly
  REQUIRE_FALSE(fits.tainted());
  REQUIRE(dominates(everything, fits));

  RequirementFrontier<4> overflowed = left;
  overflowed.merge(right);  // five axes
  REQUIRE(overflowed.tainted());
  REQUIRE_NOTHROW(overflowed.validate());
  REQUIRE(overflowed == merged(left, right));
  REQUIRE_FALSE(dominates(everything, overflowed));

  // undominated of a tainted requirement may list nothing, but it stays tainted: the caller must not read "no
  // waits left" as "satisfied".
  const RequirementFrontier<4> missing = undominated(everything, overflowed);
  REQUIRE(missing.empty());
  REQUIRE(missing.tainted());
  REQUIRE_FALSE(dominates(KnowledgeFrontier<1>{}, missing));

  // Merging a tainted requirement into a clean one that has room still taints it: the lost entry is lost for both.
  RequirementFrontier<64> roomy;
  roomy.merge(overflowed);
  REQUIRE(roomy.tainted());
  REQUIRE_FALSE(dominates(everything, roomy));
}

TEST_CASE("from_knowledge of a tainted knowledge frontier is a tainted requirement; of a clean one, a clean copy",
          "[frontier][taint]") {
  const Axis a = queue_axis(1), b = queue_axis(2), c = queue_axis(3);
  const KnowledgeFrontier<4> clean{{a, 4}, {b, 2}};
  const RequirementFrontier<4> death = RequirementFrontier<4>::from_knowledge(clean);
  REQUIRE_FALSE(death.tainted());
  REQUIRE(text(death) == text(clean));
  REQUIRE(dominates(clean, death));

  // A death frontier recorded from a stream that forgot part of its past would miss those users of the buffer.
  KnowledgeFrontier<4> forgetful = clean;
  forgetful.mark_tainted();
  const RequirementFrontier<4> unsafe = RequirementFrontier<4>::from_knowledge(forgetful);
  REQUIRE(unsafe.tainted());
  REQUIRE(text(unsafe) == text(clean));
  REQUIRE_FALSE(dominates(knows_everything({a, b}), unsafe));

  // A requirement too small for the knowledge overflows and is tainted too.
  const KnowledgeFrontier<4> three{{a, 1}, {b, 1}, {c, 1}};
  REQUIRE(RequirementFrontier<2>::from_knowledge(three).tainted());
  REQUIRE_FALSE(RequirementFrontier<4>::from_knowledge(three).tainted());
}

TEST_CASE("merge_satisfied learns a requirement's entries and inherits its taint", "[frontier][taint]") {
  const Axis a = queue_axis(1), b = queue_axis(2), c = queue_axis(3);
  KnowledgeFrontier<4> known{{a, 3}};
  const RequirementFrontier<4> waited{{a, 1}, {b, 6}};
  known.merge_satisfied(waited);
  REQUIRE_FALSE(known.tainted());
  REQUIRE(text(known) == text(Model{{a, 3}, {b, 6}}));
  REQUIRE(dominates(known, waited));

  // A tainted requirement names only part of what was waited for: its entries are learned, and the result is
  // tainted because it knows less than it could. It still does not dominate the tainted requirement.
  RequirementFrontier<4> partial{{c, 2}};
  partial.mark_tainted();
  known.merge_satisfied(partial);
  REQUIRE(known.tainted());
  REQUIRE(known.epoch(c) == 2);
  REQUIRE_FALSE(dominates(known, partial));

  // Overflow while learning evicts and taints, as any knowledge merge does.
  KnowledgeFrontier<2> tight{{a, 1}, {b, 1}};
  tight.merge_satisfied(RequirementFrontier<4>{{c, 5}});
  REQUIRE(tight.tainted());
  REQUIRE(tight.size() == 2);
  REQUIRE(tight.epoch(c) == 5);
}

TEST_CASE("undominated keeps the target's taint and lists its uncovered entries", "[frontier][taint]") {
  const Axis a = queue_axis(1), b = queue_axis(2), c = queue_axis(3);
  RequirementFrontier<4> target{{a, 5}, {b, 5}, {c, 5}};
  target.mark_tainted();
  const KnowledgeFrontier<4> reference{{a, 5}, {b, 4}};
  const RequirementFrontier<4> missing = undominated(reference, target);
  REQUIRE(missing.tainted());
  REQUIRE(text(missing) == text(Model{{b, 5}, {c, 5}}));
  // A tainted reference does not taint the result: it only knows less, and the listed waits are computed from it.
  KnowledgeFrontier<4> tainted_reference = reference;
  tainted_reference.mark_tainted();
  const RequirementFrontier<4> clean_target{{a, 5}};
  REQUIRE_FALSE(undominated(tainted_reference, clean_target).tainted());
  REQUIRE(undominated(tainted_reference, clean_target).empty());
}

TEST_CASE("compare never reports a tainted requirement as equal to or before anything", "[frontier][taint]") {
  const Axis a = queue_axis(1), b = queue_axis(2);
  RequirementFrontier<4> tainted{{a, 2}, {b, 2}};
  tainted.mark_tainted();
  const RequirementFrontier<4> same_entries{{a, 2}, {b, 2}};
  REQUIRE(compare(tainted, tainted) == FrontierOrder::kConcurrent);
  REQUIRE(compare(tainted, same_entries) == FrontierOrder::kAfter);
  REQUIRE(compare(same_entries, tainted) == FrontierOrder::kBefore);
  REQUIRE(compare(tainted, RequirementFrontier<4>{}) == FrontierOrder::kAfter);
  REQUIRE(compare(tainted, RequirementFrontier<4>{{a, 3}, {b, 3}}) == FrontierOrder::kConcurrent);

  // Knowledge taint is not consulted: a tainted knowledge frontier's entries are still facts.
  KnowledgeFrontier<4> known{{a, 2}};
  const KnowledgeFrontier<4> clean = known;
  known.mark_tainted();
  REQUIRE(compare(known, clean) == FrontierOrder::kEqual);
  REQUIRE_FALSE(known == clean);  // equality of values does include taint

  for (const std::uint64_t seed : test_seeds()) {
    CAPTURE(seed);
    Generator gen(seed, 6);
    for (int round = 0; round < kLawRounds; ++round) {
      const Model ma = gen.random();
      auto ra = gen.build<RequirementFrontier<8>>(ma);
      auto rb = gen.build<RequirementFrontier<8>>(gen.related(ma));
      ra.mark_tainted();
      if (gen.chance(0.5)) rb.mark_tainted();
      INFO("a = " << ra << ", b = " << rb);
      const FrontierOrder ab = compare(ra, rb);
      const FrontierOrder ba = compare(rb, ra);
      REQUIRE(ab != FrontierOrder::kEqual);
      REQUIRE(ab != FrontierOrder::kBefore);
      REQUIRE(ba != FrontierOrder::kEqual);
      REQUIRE(ba != FrontierOrder::kAfter);
      REQUIRE(ab == expected_order(dominates(ra, rb), dominates(rb, ra)));
      REQUIRE(ba == expected_order(dominates(rb, ra), dominates(ra, rb)));
    }
  }
}

TEST_CASE("Frontiers print their role, their entries in axis order and a tainted suffix", "[frontier]") {
  RequirementFrontier<4> required{{queue_axis(7), 3}, {Axis::make(1, 2, AxisDomain::kCollective, 5), 1}};
  REQUIRE(to_string(required) == "requirement{m0.queue.7:3, m2.collective.5.i1:1}");
  required.mark_tainted();
  REQUIRE(to_string(required) == "requirement{m0.queue.7:3, m2.collective.5.i1:1} tainted");
  REQUIRE(to_string(KnowledgeFrontier<4>{}) == "knowledge{}");
}

// ---- the roles cannot be confused --------------------------------------------------------------------------------

template <class A, class B>
concept DominatesCallable = requires(const A& a, const B& b) {
  dominates(a, b);
};
template <class A, class B>
concept CompareCallable = requires(const A& a, const B& b) {
  compare(a, b);
};
template <class A, class B>
concept MergeCallable = requires(A& a, const B& b) {
  a.merge(b);
};
template <class A, class B>
concept UndominatedCallable = requires(const A& a, const B& b) {
  undominated(a, b);
};

TEST_CASE("The roles cannot be confused: cross-role dominates, compare, merge and construction do not compile",
          "[frontier][roles]") {
  using K = KnowledgeFrontier<4>;
  using R = RequirementFrontier<4>;
  // The meaningful combinations compile, so the negative checks below are not failing for some unrelated reason.
  static_assert(DominatesCallable<K, R> && DominatesCallable<K, K> && DominatesCallable<R, R>);
  static_assert(CompareCallable<K, K> && CompareCallable<R, R>);
  static_assert(MergeCallable<K, K> && MergeCallable<R, R> && UndominatedCallable<K, R>);

  static_assert(!DominatesCallable<R, K>, "a requirement does not dominate knowledge");
  static_assert(!DominatesCallable<RequirementFrontier<64>, KnowledgeFrontier<2>>);
  static_assert(!CompareCallable<K, R> && !CompareCallable<R, K>, "compare across roles has no meaning");
  static_assert(!MergeCallable<K, R>, "knowledge learns a requirement only through merge_satisfied");
  static_assert(!MergeCallable<R, K>, "a requirement takes knowledge only through from_knowledge");
  static_assert(!UndominatedCallable<R, R> && !UndominatedCallable<K, K>);
  // A frontier is a contiguous range of entries, so without deleted constructors the span constructor would build
  // one role from the other and drop the taint on the way.
  static_assert(!std::is_convertible_v<K, R> && !std::is_convertible_v<R, K>);
  static_assert(!std::is_constructible_v<R, K> && !std::is_constructible_v<K, R>);
  static_assert(!std::is_constructible_v<R, KnowledgeFrontier<64>> &&
                !std::is_constructible_v<K, RequirementFrontier<2>>);
  SUCCEED("checked at compile time");
}

}  // namespace
}  // namespace depengine
