// A fixture of check_layering.py: a library folder that the table gives no layer.
#pragma once
#include "executors/executor.h"
