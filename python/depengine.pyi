"""depengine: a dependency engine for ML runtimes, from Python.

Push functions tagged with the variables (or engine arrays) they read and mutate; the engine runs each as soon as,
and only when, those allow: ops that use a variable take effect in push order, consecutive reads run concurrently,
a mutation waits for every earlier use. The contract is the C++ one (engine/engine.h); this stub says what Python adds.

The GIL: a Python op holds it only while its function runs; every call here that can block (a push held at
max_in_flight, every wait, replay, close, the engine's collection) releases it. A wait raises KeyboardInterrupt
within a tick (20 ms) of Ctrl-C and leaves the engine usable.
"""
from types import TracebackType
from typing import Any, Callable, Iterable, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str

class Error(RuntimeError):
    """Misuse: a dead or foreign variable, a closed engine, a wait from inside an op or a capture, a second completion."""

class Cancelled(Error):
    """The error of an op cancelled before it ran (its CancelScope was cancelled)."""

class Variable:
    """A handle of one engine variable (Engine.variable()). Dead once deleted (Engine.delete_variable)."""

class Array:
    """A NumPy array ordered by the engine: an ndarray plus a variable (Engine.array/empty/zeros).

    Listed in reads= or mutates=, the op's function receives a view of it (read-only when only read). numpy() and
    np.asarray() wait for this array's writers only and return a copy. Dropped by Python, its deletion is scheduled
    after the ops queued on it, which run on live memory."""
    @property
    def shape(self) -> Tuple[int, ...]: ...
    @property
    def dtype(self) -> np.dtype[Any]: ...
    @property
    def ndim(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def variable(self) -> Variable: ...
    @property
    def engine(self) -> Engine: ...
    def numpy(self) -> npt.NDArray[Any]:
        """Waits for the ops pushed before that mutate this array; raises the error the last left; returns a copy."""
    def __array__(self, dtype: Optional[npt.DTypeLike] = None) -> npt.NDArray[Any]: ...
    def __dlpack__(self, stream: Optional[int] = None) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    def assign(self, value: npt.ArrayLike) -> None:
        """Pushes an op copying value (same shape, ValueError otherwise; a dtype that casts within its kind, TypeError
        otherwise) into this array."""

VarLike = Union[Variable, Array]

class Completion:
    """The first argument of a push_async function: call it once, from any thread: done() or done(exception)."""
    def __call__(self, error: Optional[BaseException] = None) -> None: ...

class CancelScope:
    """Ops pushed with scope=this are cancelled together: cancel() makes those not started complete with Cancelled."""
    def __init__(self) -> None: ...
    def cancel(self) -> None: ...
    @property
    def cancelled(self) -> bool: ...
    @property
    def pending(self) -> int: ...

class Graph:
    """Pushes captured once (with engine.capture() as graph) and replayed (engine.replay(graph)). It keeps the Arrays
    its ops use alive. Replaying a graph after a Variable it uses was deleted raises Error."""
    def __len__(self) -> int: ...

class Capture:
    def __enter__(self) -> Graph: ...
    def __exit__(self, type: Optional[type], value: Optional[BaseException], tb: Optional[TracebackType]) -> bool: ...

class Engine:
    """A dependency engine. A context manager: leaving the block waits (raising the ops' first error) and closes.

    executor: "threads" (a oneTBB pool of `workers`, 0: DEPENGINE_CPU_WORKERS or the hardware threads) or "inline"
    (every op runs on the thread that makes it ready: the debugging mode). The C++ engine's environment knobs apply:
    DEPENGINE_ENGINE_TYPE, DEPENGINE_CPU_WORKERS, DEPENGINE_TRACE, DEPENGINE_STALL_REPORT.
    error_sink: called as sink(op_name, exception) for each op error no wait raised (by default a line on stderr).
    help_above: 0 (off) or under max_in_flight: a push that finds more ops in flight first runs queued ops on its own
    thread (EngineOptions::help_above; docs/performance.md, "Helping pushes").
    """
    def __init__(self, *, workers: int = 0, executor: str = "threads", max_in_flight: int = 65536,
                 help_above: int = 0, trace: Optional[str] = None,
                 error_sink: Optional[Callable[[str, BaseException], None]] = None,
                 stall_report_after: Optional[float] = None, cancel_on_destruction: bool = False) -> None: ...
    def variable(self) -> Variable: ...
    def delete_variable(self, var: Variable) -> None:
        """Schedules the variable's deletion after every op pushed on it; the handle is dead from now."""
    def array(self, data: npt.ArrayLike, dtype: Optional[npt.DTypeLike] = None) -> Array:
        """An engine array holding a C-contiguous copy of data."""
    def empty(self, shape: Union[int, Tuple[int, ...]], dtype: npt.DTypeLike = "float64") -> Array: ...
    def zeros(self, shape: Union[int, Tuple[int, ...]], dtype: npt.DTypeLike = "float64") -> Array: ...
    def push(self, fn: Callable[..., Any], reads: Iterable[VarLike] = (), mutates: Iterable[VarLike] = (), *,
             name: str = "", priority: int = 0, no_skip: bool = False, scope: Optional[CancelScope] = None) -> None:
        """Pushes fn, called as fn(*views): a view of each Array in reads then mutates, in order (Variables pass
        nothing). An exception it raises is raised again, the same object, by the wait that reports it, with the
        note "depengine: raised by op '<name>'" and the attribute depengine_op."""
    def push_async(self, fn: Callable[..., Any], reads: Iterable[VarLike] = (), mutates: Iterable[VarLike] = (), *,
                   name: str = "", priority: int = 0, no_skip: bool = False,
                   scope: Optional[CancelScope] = None) -> None:
        """As push; fn(done, *views) receives a Completion first, and the op completes when done is called."""
    def wait_var(self, var: VarLike) -> None:
        """Waits for every mutation of var pushed before; raises (and clears) its error."""
    def wait_all(self) -> None:
        """Waits for every op; raises the first error no wait has raised."""
    def wait_scope(self, scope: CancelScope) -> None:
        """Waits for every op pushed with scope; raises nothing."""
    def version(self, var: VarLike) -> int: ...
    def capture(self) -> Capture:
        """with engine.capture() as graph: the block's pushes (from this thread) are captured, not run."""
    def replay(self, graph: Graph, scope: Optional[CancelScope] = None) -> None: ...
    def in_flight_report(self) -> str: ...
    @property
    def in_flight(self) -> int: ...
    def start_trace(self, path: str) -> None: ...
    def stop_trace(self) -> None: ...
    def close(self) -> None:
        """Waits for every op (interruptibly), then closes: later calls raise Error. Idempotent."""
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> Engine: ...
    def __exit__(self, type: Optional[type], value: Optional[BaseException], tb: Optional[TracebackType]) -> bool: ...
