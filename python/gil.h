// The GIL from threads Python did not start, and references to Python objects that C++ code of any thread may drop.
//
// The engine calls an op's function on its worker threads (oneTBB's, or a thread that helps while it waits). A Python
// op takes the GIL there only while its callable runs (GilHold), and everything the engine keeps of Python (the
// callable, the arrays an op uses, an exception an op raised) is a PyRef, whose last owner may be any thread: a
// worker after the op, the thread that destroys a Graph, a wait that clears an error. PyRef takes the GIL to drop its
// reference, so it is safe wherever the engine happens to destroy it.
//
// Why not pybind11's gil_scoped_acquire on the workers: on a thread Python does not know, it creates a thread state
// and deletes it again at the end of every scope, several microseconds per op. GilHold gives such a thread one thread
// state for its lifetime instead, made on first use (PyGILState keeps it once its count never returns to zero), after
// which taking the GIL is one PyGILState_Ensure; the state is deleted when the thread ends, or cleared with the
// interpreter at exit (the module's atexit hook closes every engine before that, so no worker takes the GIL
// afterwards).
//
// Lock order: a thread never waits for the GIL while it holds a lock of the engine that a thread holding the GIL may
// wait for, because every binding that calls into the engine releases the GIL first (engine_binding.cpp). That is what
// lets any thread take the GIL here.
#pragma once

#include <Python.h>

#include <utility>

namespace depengine::python {

// Holds the GIL for its scope, on any thread: a worker, or a Python thread that holds the GIL already (nested: then
// it only counts) or released it around an engine call.
class GilHold {
 public:
  GilHold() noexcept : state_(ensure()) {}
  ~GilHold() { PyGILState_Release(state_); }
  GilHold(const GilHold&) = delete;
  GilHold& operator=(const GilHold&) = delete;

 private:
  // A thread Python has never seen gets a thread state that stays: one Ensure that is not released (its count stays at
  // 1), after which the thread gives the GIL back. Every later Ensure/Release pair only counts and swaps. When the
  // thread ends (a helper thread of a wait does), Forget drops that count, which deletes the state; at the process's
  // end, after the interpreter is gone, it leaves it (the interpreter cleared it).
  struct Forget {
    bool primed = false;
    ~Forget() {
      if (!primed || !Py_IsInitialized() || _Py_IsFinalizing()) return;
      PyEval_RestoreThread(PyGILState_GetThisThreadState());
      PyGILState_Release(PyGILState_UNLOCKED);  // the count reaches 0: clears and deletes the state, releases the GIL
    }
  };

  static PyGILState_STATE ensure() noexcept {
    thread_local bool known = false;
    if (!known) {
      if (PyGILState_GetThisThreadState() == nullptr) {
        thread_local Forget forget;
        (void)PyGILState_Ensure();
        (void)PyEval_SaveThread();
        forget.primed = true;
      }
      known = true;
    }
    return PyGILState_Ensure();
  }

  PyGILState_STATE state_;
};

// An owned reference to a Python object (or null) that any thread may destroy: it takes the GIL to drop it. Move-only,
// noexcept moves, the size of a pointer, so that it fits in an op's inline storage. Creating one from a borrowed
// object requires the GIL; moving one does not.
class PyRef {
 public:
  PyRef() noexcept = default;
  static PyRef borrow(PyObject* object) noexcept {  // requires the GIL
    Py_XINCREF(object);
    return PyRef(object);
  }
  static PyRef steal(PyObject* object) noexcept { return PyRef(object); }
  PyRef(PyRef&& other) noexcept : object_(std::exchange(other.object_, nullptr)) {}
  PyRef& operator=(PyRef&& other) noexcept {
    if (this != &other) {
      reset();
      object_ = std::exchange(other.object_, nullptr);
    }
    return *this;
  }
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  ~PyRef() { reset(); }

  [[nodiscard]] PyObject* get() const noexcept { return object_; }
  explicit operator bool() const noexcept { return object_ != nullptr; }
  // Drops the reference, taking the GIL for it (a no-op for a thread that holds it).
  void reset() noexcept {
    if (object_ == nullptr) return;
    // Once the interpreter is finalizing, a thread that takes the GIL may be stopped for good: leak the object instead
    // (the process is ending; the module's atexit hook has closed every engine by then, so this is a stray).
    if (_Py_IsFinalizing() || !Py_IsInitialized()) {
      object_ = nullptr;
      return;
    }
    GilHold gil;
    Py_DECREF(std::exchange(object_, nullptr));
  }
  // Drops the reference; the caller holds the GIL.
  void reset_holding_gil() noexcept { Py_XDECREF(std::exchange(object_, nullptr)); }

 private:
  explicit PyRef(PyObject* object) noexcept : object_(object) {}
  PyObject* object_ = nullptr;
};

}  // namespace depengine::python
