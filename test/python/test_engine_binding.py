"""Engine, variables, push, push_async, waits, CancelScope and capture/replay from Python (python/engine_binding.h)."""
import threading

import pytest

import depengine


def test_push_orders_by_variables(engine):
    a, b = engine.variable(), engine.variable()
    seen = []
    engine.push(lambda: seen.append("write a"), mutates=[a])
    engine.push(lambda: seen.append("read a, write b"), reads=[a], mutates=[b])
    engine.push(lambda: seen.append("write a again"), mutates=[a])
    engine.wait_var(b)
    assert seen[:2] == ["write a", "read a, write b"]
    engine.wait_all()
    assert seen == ["write a", "read a, write b", "write a again"]
    assert engine.version(a) == 2 and engine.version(b) == 1


def test_bad_arguments_raise_clear_errors(engine):
    v = engine.variable()
    with pytest.raises(TypeError, match="fn must be callable, not int"):
        engine.push(3, mutates=[v])
    with pytest.raises(TypeError, match=r"mutates\[1\]: expected a depengine.Variable or depengine.Array, got str"):
        engine.push(lambda: None, mutates=[v, "x"])
    with pytest.raises(TypeError, match="reads must be a list"):
        engine.push(lambda: None, reads=5)
    with pytest.raises(TypeError, match="wait_var: expected"):
        engine.wait_var(None)
    with pytest.raises(ValueError, match=r"help_above \(16\) must be under max_in_flight \(16\)"):
        depengine.Engine(max_in_flight=16, help_above=16)
    with pytest.raises(ValueError, match="executor must be 'threads' or 'inline'"):
        depengine.Engine(executor="gpu")
    engine.delete_variable(v)
    with pytest.raises(depengine.Error, match="deleted"):
        engine.push(lambda: None, mutates=[v])
    with depengine.Engine(workers=1) as other:
        foreign = other.variable()
        with pytest.raises(depengine.Error):
            engine.push(lambda: None, mutates=[foreign])


def test_error_is_the_same_object_with_the_op_name(engine):
    v = engine.variable()
    raised = ValueError("boom")

    def fail():
        raise raised

    engine.push(fail, mutates=[v], name="forward 3")
    with pytest.raises(ValueError) as caught:
        engine.wait_var(v)
    assert caught.value is raised
    assert caught.value.depengine_op == "forward 3"
    assert "depengine: raised by op 'forward 3'" in caught.value.__notes__
    engine.wait_var(v)  # the wait cleared it
    engine.wait_all()


def test_error_skips_dependents_and_wait_all_reports_it(engine):
    a, b = engine.variable(), engine.variable()
    ran = []

    def fail():
        raise KeyError("k")

    engine.push(fail, mutates=[a], name="fail")
    engine.push(lambda: ran.append("skipped"), reads=[a], mutates=[b])
    engine.push(lambda: ran.append("no_skip"), reads=[a], mutates=[b], no_skip=True)
    with pytest.raises(KeyError) as caught:
        engine.wait_all()
    assert caught.value.depengine_op == "fail"
    assert ran == ["no_skip"]


def test_errors_of_several_threads_none_lost():
    sunk = []
    with depengine.Engine(workers=2, error_sink=lambda name, error: sunk.append((name, error))) as engine:
        errors = {}

        def pusher(k):
            v = engine.variable()
            error = RuntimeError(f"thread {k}")
            errors[k] = error

            def fail():
                raise error

            engine.push(fail, mutates=[v], name=f"op {k}")
            try:
                engine.wait_var(v)
            except RuntimeError as e:
                assert e is error and e.depengine_op == f"op {k}"
                errors[k] = "reported"

        threads = [threading.Thread(target=pusher, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(r == "reported" for r in errors.values()) and len(errors) == 4
    assert sunk == []


def test_unreported_errors_reach_the_sink():
    sunk = []
    engine = depengine.Engine(workers=2, error_sink=lambda name, error: sunk.append((name, error)))
    v, w = engine.variable(), engine.variable()
    first, second = ValueError("first"), ValueError("second")

    def raiser(e):
        def fn():
            raise e
        return fn

    engine.push(raiser(first), mutates=[v], name="a")
    engine.push(raiser(second), reads=[v], mutates=[w], name="b", no_skip=True)  # raises after "a" did
    with pytest.raises(ValueError) as caught:
        engine.wait_all()
    assert caught.value is first
    assert sunk == [("b", second)]
    engine.close()


def test_push_async_completed_from_another_python_thread(engine):
    v = engine.variable()
    result = []

    def start(done):
        def later():
            result.append("async")
            done()
        threading.Thread(target=later).start()

    engine.push_async(start, mutates=[v])
    engine.push(lambda: result.append("after"), reads=[v])
    engine.wait_all()
    assert result == ["async", "after"]


def test_push_async_error_and_second_completion(engine):
    v = engine.variable()
    kept = []
    error = OSError("io")

    def start(done):
        kept.append(done)
        done(error)

    engine.push_async(start, mutates=[v], name="read file")
    with pytest.raises(OSError) as caught:
        engine.wait_var(v)
    assert caught.value is error and caught.value.depengine_op == "read file"
    with pytest.raises(depengine.Error):
        kept[0]()
    with pytest.raises(TypeError, match="exception instance"):
        kept[0](42)


def test_cancel_scope(threaded):
    engine = threaded
    gate = threading.Event()
    v, w = engine.variable(), engine.variable()
    scope = depengine.CancelScope()
    ran = []
    engine.push(lambda: gate.wait(), mutates=[v])
    for k in range(3):
        engine.push(lambda k=k: ran.append(k), mutates=[v], scope=scope)
    engine.push(lambda: ran.append("other"), mutates=[w])
    scope.cancel()
    assert scope.cancelled
    gate.set()
    engine.wait_scope(scope)
    assert scope.pending == 0
    with pytest.raises(depengine.Cancelled):
        engine.wait_var(v)
    engine.wait_all()
    assert ran == ["other"]


def test_capture_and_replay_ordered_with_eager_pushes(engine):
    v = engine.variable()
    log = []
    with engine.capture() as step:
        engine.push(lambda: log.append("captured 1"), mutates=[v])
        engine.push(lambda: log.append("captured 2"), mutates=[v])
    assert len(step) == 2 and log == []
    engine.push(lambda: log.append("eager before"), mutates=[v])
    engine.replay(step)
    engine.push(lambda: log.append("eager between"), mutates=[v])
    engine.replay(step)
    engine.push(lambda: log.append("eager after"), mutates=[v])
    engine.wait_all()
    assert log == ["eager before", "captured 1", "captured 2", "eager between", "captured 1", "captured 2",
                   "eager after"]


def test_capture_refuses_waits_and_drops_on_exception(engine):
    v = engine.variable()
    with pytest.raises(depengine.Error, match="inside a capture"):
        with engine.capture():
            engine.push(lambda: None, mutates=[v])
            engine.wait_var(v)
    log = []
    with pytest.raises(ZeroDivisionError):
        with engine.capture() as g:
            engine.push(lambda: log.append(1), mutates=[v])
            1 / 0
    with pytest.raises(depengine.Error, match="capture has not ended"):
        engine.replay(g)
    engine.wait_all()
    assert log == []


def test_wait_from_inside_an_op_raises(engine):
    v = engine.variable()
    caught = []

    def op():
        try:
            engine.wait_all()
        except depengine.Error as e:
            caught.append(str(e))

    engine.push(op, mutates=[v])
    engine.wait_all()
    assert caught and "inside a running op" in caught[0]


def test_closed_engine_refuses_calls():
    engine = depengine.Engine(workers=1)
    v = engine.variable()
    ran = []
    engine.push(lambda: ran.append(1), mutates=[v])
    engine.close()
    assert ran == [1] and engine.closed
    with pytest.raises(depengine.Error, match="closed"):
        engine.push(lambda: None, mutates=[v])
    engine.close()  # idempotent


def test_in_flight_report_and_trace(tmp_path, threaded):
    engine = threaded
    gate = threading.Event()
    v = engine.variable()
    engine.push(lambda: gate.wait(), mutates=[v], name="held")
    engine.push(lambda: None, mutates=[v], name="queued")
    assert engine.in_flight == 2
    assert "queued" in engine.in_flight_report()
    gate.set()
    engine.wait_all()
    path = tmp_path / "trace.json"
    engine.start_trace(str(path))
    engine.push(lambda: None, mutates=[v], name="traced op")
    engine.stop_trace()
    assert "traced op" in path.read_text()


def test_array_dropped_inside_a_capture_lives_until_the_capture_ends(engine):
    import numpy as np

    out = engine.zeros(1)
    with engine.capture() as step:
        tmp = engine.array(np.full(1, 2.0))

        def add(t, o):
            o += t

        engine.push(add, reads=[tmp], mutates=[out])
        del tmp
    engine.replay(step)
    engine.replay(step)
    assert out.numpy()[0] == 4.0


def test_environment_knobs_apply_as_in_cpp(tmp_path):
    # DEPENGINE_ENGINE_TYPE=NaiveEngine: every op on the pushing thread; DEPENGINE_TRACE: a trace file per engine.
    import os
    import subprocess
    import sys

    trace = tmp_path / "env.json"
    script = ("import threading, depengine\n"
              "with depengine.Engine(workers=2) as e:\n"
              "    v = e.variable(); seen = []\n"
              "    e.push(lambda: seen.append(threading.get_ident()), mutates=[v], name='env op')\n"
              "    e.wait_all()\n"
              "    print(seen == [threading.get_ident()])\n")
    env = dict(os.environ, DEPENGINE_ENGINE_TYPE="NaiveEngine", DEPENGINE_TRACE=str(trace))
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
    assert "env op" in trace.read_text()
    env["DEPENGINE_ENGINE_TYPE"] = "Bogus"
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "depengine.Error" in result.stderr
