// A fixture of check_layering.py: the frontier layer may include support/, not the engine above it.
#pragma once
#include "engine/engine.h"
#include "support/spinlock.h"
