// VariableBinding: the Python class depengine.Variable, a handle of one engine variable (engine/var.h), made by
// Engine.variable(). It names the variable in reads= and mutates=, wait_var() and delete_variable(); it carries no
// data. A deleted variable's handle is dead: using it raises depengine.Error.
#pragma once

#include <depengine/engine/var.h>

namespace depengine::python {

struct VariableBinding {
  Var var;
};

}  // namespace depengine::python
