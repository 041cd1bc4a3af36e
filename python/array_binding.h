// ArrayBinding: the Python class depengine.Array, a NumPy array that the engine orders: an ndarray plus a variable.
//
// Made by Engine.array(data) (a C-contiguous copy of `data`, so that nothing outside the engine holds a writable alias
// of it), Engine.empty(shape, dtype) or Engine.zeros(shape, dtype). Listed in a push's reads= or mutates=, it orders
// the op like its variable, and the op's function receives a view of it: read-only when the op only reads it.
// numpy() and __array__ wait for the array's own writers (the ops pushed before that mutate it; not the whole engine),
// raise the error the last of them left, if any, and return a copy: a snapshot that later ops cannot change under
// the caller. __dlpack__ and __dlpack_device__ export that snapshot (CPU), for np.from_dlpack.
//
// Lifetime: the array keeps its engine alive. When Python drops it, its variable's deletion is scheduled
// (DeleteVariable) after every op pushed on it, and the deleter drops the ndarray: ops queued on a dropped array run
// on live memory. Once the engine is closed the array is a plain snapshot holder: numpy() returns its data, and a push
// naming it raises depengine.Error.
//
// Thread safety: as the engine's; the data itself is the ops' to share, as the engine orders them.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <depengine/engine/var.h>

namespace depengine::python {

class EngineBinding;

class ArrayBinding {
 public:
  // `engine_object` is the Python Engine that `engine` belongs to; `data` a C-contiguous ndarray the array owns.
  ArrayBinding(pybind11::object engine_object, EngineBinding& engine, pybind11::array data);
  ~ArrayBinding();  // schedules the deletion (GIL held: called by Python's deallocation)
  ArrayBinding(const ArrayBinding&) = delete;
  ArrayBinding& operator=(const ArrayBinding&) = delete;

  [[nodiscard]] Var var() const noexcept { return var_; }
  [[nodiscard]] const pybind11::array& data() const noexcept { return data_; }
  // Throws ValueError when this array belongs to another engine than `engine` (`what`: the list that names it).
  void check_engine(const EngineBinding& engine, const char* what) const;

  // Waits for the array's writers (interruptibly) and returns a copy of its data.
  [[nodiscard]] pybind11::array numpy();
  // Pushes an op that copies `value` into the array (mutating it). Shapes must match (ValueError); `value`'s dtype must
  // cast to the array's within its kind (TypeError otherwise).
  void assign(pybind11::handle value);

  static void bind(pybind11::module_& module);

 private:
  pybind11::object engine_object_;  // keeps the engine alive
  EngineBinding* engine_;           // owned by engine_object_
  Var var_;
  pybind11::array data_;
};

}  // namespace depengine::python
