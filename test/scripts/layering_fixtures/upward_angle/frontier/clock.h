// Fixture: the frontier layer including the engine through the project's name, as the library's headers do.
#pragma once
#include <depengine/engine/engine.h>
