"""The GIL rules (python/engine_binding.h, gil.h, interruptible_wait.h), each case under the watchdog of conftest.py:
a deadlock fails the test by the watchdog's timeout, with every thread's stack."""
import gc
import os
import signal
import threading
import time

import pytest

import depengine


def test_push_past_max_in_flight_with_python_ops_queued():
    # Python ops queued behind the bound must be able to take the GIL while the pushing thread waits at it.
    with depengine.Engine(workers=2, max_in_flight=4) as engine:
        v = engine.variable()
        count = [0]

        def bump():
            count[0] += 1

        for _ in range(200):
            engine.push(bump, mutates=[v])
        engine.wait_all()
        assert count[0] == 200


def test_helping_pushes_run_queued_python_ops_on_the_pushing_thread():
    # The only worker is held by an op waiting for an event (it lets the GIL go); the pushes past help_above run the ops
    # queued behind it on this thread, which must take the GIL for each while the push itself has let it go.
    gate = threading.Event()
    inside = threading.Event()
    with depengine.Engine(workers=1, help_above=8) as engine:
        def hold():
            inside.set()
            gate.wait()

        engine.push(hold, mutates=[engine.variable()])
        try:
            assert inside.wait(timeout=60)
            here = threading.get_ident()
            ran_on = []
            for _ in range(100):
                engine.push(lambda: ran_on.append(threading.get_ident()), mutates=[engine.variable()])
            ran_before_the_worker_was_free = len(ran_on)
        finally:
            gate.set()  # a failed assertion must not leave the engine's exit waiting for the held op
        engine.wait_all()
    assert ran_before_the_worker_was_free >= 100 - 8
    assert ran_on.count(here) >= 100 - 8
    assert len(ran_on) == 100


def test_waits_from_several_python_threads_at_once(threaded):
    engine = threaded
    gate = threading.Event()
    vars_ = [engine.variable() for _ in range(4)]
    for v in vars_:
        engine.push(lambda: gate.wait(), mutates=[v])
    done = []

    def waiter(k):
        engine.wait_var(vars_[k])
        engine.wait_all()
        done.append(k)

    threads = [threading.Thread(target=waiter, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join()
    assert sorted(done) == [0, 1, 2, 3]


def test_a_python_op_that_pushes(engine):
    v = engine.variable()
    log = []

    def parent():
        log.append("parent")
        engine.push(lambda: log.append("child"), mutates=[v])

    engine.push(parent, mutates=[v])
    engine.wait_all()
    assert log == ["parent", "child"]


def test_completion_called_from_another_python_thread_while_main_waits(threaded):
    engine = threaded
    v = engine.variable()
    handed = []
    ready = threading.Event()

    def start(done):
        handed.append(done)
        ready.set()

    engine.push_async(start, mutates=[v])

    def completer():
        ready.wait()
        handed[0]()

    t = threading.Thread(target=completer)
    t.start()
    engine.wait_var(v)  # the completer needs the GIL while this thread waits
    t.join()


def test_engine_collected_with_ops_queued():
    ran = []
    gate = threading.Event()
    engine = depengine.Engine(workers=2)
    v = engine.variable()
    engine.push(lambda: gate.wait(), mutates=[v])
    for k in range(50):
        engine.push(lambda k=k: ran.append(k), mutates=[v])
    threading.Timer(0.05, gate.set).start()  # releases the first op once the engine is being collected
    del engine
    gc.collect()
    assert ran == list(range(50))


def test_ctrl_c_during_a_wait_raises_keyboard_interrupt_and_leaves_the_engine_usable(threaded):
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    engine = threaded
    gate = threading.Event()
    v = engine.variable()
    engine.push(lambda: gate.wait(), mutates=[v])
    sent = []

    def interrupt():
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(0.2, interrupt)
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        engine.wait_var(v)
    raised = time.monotonic()
    timer.join()
    # The wait looks at signals every 20 ms; the bound here is loose, for a loaded machine, but without the
    # interruptible wait the call would not return at all until the gate opened, which nothing here does.
    assert raised - sent[0] < 1.0
    assert not gate.is_set()
    with pytest.raises(KeyboardInterrupt):
        threading.Timer(0.05, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        engine.wait_all()
    gate.set()
    engine.wait_var(v)
    w = engine.variable()
    engine.push(lambda: None, mutates=[w])
    engine.wait_all()


def test_engine_dropped_by_its_own_op():
    # The op's closure holds the last reference to the engine: dropping it after the op ran closes the engine from
    # inside that op, which must neither wait for the op (a deadlock) nor destroy what it runs on.
    gate = threading.Event()
    ran = threading.Event()

    def make():
        engine = depengine.Engine(workers=2)
        v = engine.variable()

        def op():
            gate.wait()
            engine.variable()  # uses the engine: the closure keeps it
            ran.set()

        engine.push(op, mutates=[v])

    make()
    gate.set()
    assert ran.wait(30)
