"""Shared fixtures of the Python module's tests (test/python/, run by ctest through pytest).

Every test runs under a watchdog: faulthandler's own thread, which needs no GIL, dumps every thread's stack and ends
the process if a test outlives WATCHDOG_S, so a deadlock (on the GIL or in the engine) fails the test with the
stacks that show it instead of hanging the suite. The watchdog is the only timing in these tests; none asserts speed.
"""
import faulthandler
import os
import sys

import pytest

import depengine

WATCHDOG_S = float(os.environ.get("DEPENGINE_PYTEST_WATCHDOG_S", "60"))


@pytest.fixture(autouse=True)
def watchdog():
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True, file=sys.stderr)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(params=["threads", "inline"])
def executor(request):
    return request.param


@pytest.fixture
def engine(executor):
    with depengine.Engine(workers=2, executor=executor) as e:
        yield e


@pytest.fixture
def threaded():
    """A pool engine, for tests whose ops block on a gate (an inline engine would run them on the pushing thread)."""
    with depengine.Engine(workers=2) as e:
        yield e
