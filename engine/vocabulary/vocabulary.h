// Deprecated: moved to frontier/vocabulary.h in 0.4.0, when the folders took the order of the layers
// (docs/architecture.md, "Layers"). This forwarding header keeps #include <depengine/engine/vocabulary/vocabulary.h>
// compiling, with a message, until 0.5.0 removes it (CHANGELOG.md).
#pragma once

#pragma message(                                                                              \
    "depengine: <depengine/engine/vocabulary/vocabulary.h> is deprecated and goes in 0.5.0; " \
    "include <depengine/frontier/vocabulary.h>")

#include <depengine/frontier/vocabulary.h>
