"""gateway.heap: a task process's heap is frozen once, as its second task begins, after the
garbage the first left has been collected; later garbage is still collected.

Each case runs in an interpreter of its own: freezing is for the rest of a process's life."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(120)

_SCRIPT = """
import gc, weakref
from gateway.heap import task_started

class Node:
    pass

def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)

gc.disable()  # only the collections the test asks for
task_started()
assert gc.get_freeze_count() == 0, "nothing is frozen as the first task begins"
left_by_first = cycle()
kept = Node()  # what the process holds from here on: frozen
task_started()
assert left_by_first() is None, "the first task's garbage is collected, not frozen"
assert gc.get_freeze_count() > 0, "the heap is frozen as the second task begins"
frozen = gc.get_freeze_count()
assert all(o is not kept for o in gc.get_objects()), "what it holds is out of the collector's view"
task_started()
assert gc.get_freeze_count() == frozen, "frozen once, not again at the third task"
later = cycle()
gc.collect()
assert later() is None, "garbage made after the freeze is collected as before"
print("ok")
"""


def test_the_second_task_freezes_what_the_process_holds_and_later_garbage_is_collected() -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_SCRIPT)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr[-2000:]
