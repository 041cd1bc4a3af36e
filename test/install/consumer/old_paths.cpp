// Headers that moved in 0.2.0 still compile from their old paths, through forwarding headers that print where they went
// (CHANGELOG.md), until 0.3.0.
#include <type_traits>

#include <depengine/engine/shutdown_hook.h>
#include <depengine/memory/buffer.h>

static_assert(std::is_class_v<depengine::ShutdownHook>);
static_assert(std::is_class_v<depengine::Buffers>);
