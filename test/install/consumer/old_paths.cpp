// Headers that moved in 0.4.0 still compile from their old paths, through forwarding headers that print where they went
// (CHANGELOG.md), until 0.5.0.
#include <type_traits>

#include <depengine/engine/frontier/axis.h>
#include <depengine/engine/frontier/frontier.h>
#include <depengine/engine/frontier/frontier_entry.h>
#include <depengine/engine/frontier/timeline.h>
#include <depengine/engine/frontier/tracker.h>
#include <depengine/engine/vocabulary/vocabulary.h>
#include <depengine/memory/buffers/buffer.h>

static_assert(std::is_class_v<depengine::Buffers>);
static_assert(std::is_class_v<depengine::Timeline>);
static_assert(std::is_class_v<depengine::Tracker>);
static_assert(depengine::kMaxEngineAxes > 0);
