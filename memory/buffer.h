// Deprecated: Buffers moved to memory/buffers/buffer.h in 0.2.0 (the layers: the pools below the engine, Buffers above
// it). This forwarding header keeps #include <depengine/memory/buffer.h> compiling, with a message, until 0.3.0
// removes it (CHANGELOG.md).
#pragma once

#pragma message( \
    "depengine: <depengine/memory/buffer.h> is deprecated and goes in 0.3.0; include <depengine/memory/buffers/buffer.h>")

#include <depengine/memory/buffers/buffer.h>
