// A fixture of check_layering.py: a forwarding header may include the header that moved, and nothing else.
#pragma once
#include <depengine/engine/engine.h>
#include <depengine/frontier/frontier.h>
