// Deprecated: ShutdownHook moved to engine/engine_hook.h, beside ReportHook, in 0.2.0. This forwarding header keeps
// #include <depengine/engine/shutdown_hook.h> compiling, with a message, until 0.3.0 removes it (CHANGELOG.md).
#pragma once

#pragma message( \
    "depengine: <depengine/engine/shutdown_hook.h> is deprecated and goes in 0.3.0; include <depengine/engine/engine_hook.h>")

#include <depengine/engine/engine_hook.h>
