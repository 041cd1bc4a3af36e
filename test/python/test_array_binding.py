"""Engine arrays (python/array_binding.h): views in ops, waits for the array's own writers, lifetimes, bad input."""
import gc
import threading

import numpy as np
import pytest

import depengine


def test_ops_receive_views_read_only_for_reads(engine):
    src = engine.array(np.arange(5, dtype=np.float32))
    dst = engine.zeros(5, dtype=np.float32)
    flags = []

    def double(s, d):
        flags.append((s.flags.writeable, d.flags.writeable))
        d[:] = 2 * s

    engine.push(double, reads=[src], mutates=[dst])
    assert np.array_equal(dst.numpy(), np.arange(5, dtype=np.float32) * 2)
    assert np.array_equal(np.asarray(dst), dst.numpy()) and np.asarray(dst, dtype=np.int64).dtype == np.int64
    assert flags == [(False, True)]

    def write_to_read(s, d):
        s[0] = 1

    engine.push(write_to_read, reads=[src], mutates=[dst])
    with pytest.raises(ValueError, match="read-only"):
        dst.numpy()


def test_array_copies_its_input_and_exports_dlpack(engine):
    data = np.ones(3)
    a = engine.array(data)
    data[:] = 7
    assert np.array_equal(a.numpy(), np.ones(3))
    assert np.array_equal(np.from_dlpack(a), np.ones(3))
    assert a.__dlpack_device__() == (1, 0)
    assert a.shape == (3,) and a.dtype == np.float64 and a.ndim == 1 and a.size == 3


def test_numpy_waits_only_for_the_arrays_writers(threaded):
    engine = threaded
    gate = threading.Event()
    a = engine.array(np.zeros(2))
    other = engine.variable()
    engine.push(lambda: gate.wait(), mutates=[other])  # holds the engine busy, but not `a`

    def fill(x):
        x[:] = 5

    engine.push(fill, mutates=[a])
    assert np.array_equal(a.numpy(), [5, 5])  # returns although `other`'s op still waits on the gate
    assert engine.in_flight >= 1
    gate.set()


def test_dropped_array_lives_until_its_ops_ran(threaded):
    engine = threaded
    gate = threading.Event()
    a = engine.array(np.arange(1000.0))
    out = engine.zeros(1)
    engine.push(lambda x: gate.wait(), mutates=[a])

    def total(x, o):
        o[0] = x.sum()

    engine.push(total, reads=[a], mutates=[out])
    del a
    gc.collect()
    gate.set()
    assert out.numpy()[0] == np.arange(1000.0).sum()


def test_assign_checks_shape_and_dtype(engine):
    a = engine.zeros((2, 2))
    a.assign(np.ones((2, 2), dtype=np.float32))
    assert np.array_equal(a.numpy(), np.ones((2, 2)))
    with pytest.raises(ValueError, match="shape"):
        a.assign(np.ones(3))
    with pytest.raises(TypeError, match="cannot cast complex128"):
        a.assign(np.ones((2, 2), dtype=np.complex128))
    with pytest.raises(TypeError, match="object arrays"):
        engine.array([object()])


def test_array_of_another_engine_is_refused(engine):
    with depengine.Engine(workers=1) as other:
        foreign = other.zeros(1)
        with pytest.raises(ValueError, match="another engine"):
            engine.push(lambda x: None, mutates=[foreign])


def test_array_after_close_keeps_its_data():
    engine = depengine.Engine(workers=1)
    a = engine.zeros(2)

    def fill(x):
        x[:] = 3

    engine.push(fill, mutates=[a])
    engine.close()
    assert np.array_equal(a.numpy(), [3, 3])
    with pytest.raises(depengine.Error, match="closed"):
        engine.push(fill, mutates=[a])
