"""How the connector's objects travel to Spark's Python processes, so that one without OrbitMQ
fails with one line saying so.

Spark pickles the data source class into its planner processes and the readers and writers into
executors' Python workers. Pickled by reference, as classes normally are, they make a worker
without the ``orbitmq`` package die unpickling them, with a ModuleNotFoundError deep in Spark's
worker code. Instead:

- the DataSource class (``source.py``, which imports OrbitMQ only inside its methods) and
  :func:`revive` travel *by value* (cloudpickle's ``register_pickle_by_value``): they load
  anywhere PySpark does;
- readers and writers pickle as ``revive(module, class, state)`` (:func:`ship`), with their state
  pickled apart: ``revive`` imports OrbitMQ first and, when it is missing, raises
  :data:`MISSING` naming the interpreter and the host, before anything else is unpickled.

``revive`` also freezes the garbage collector's view of the worker once (:func:`freeze_heap`)
and keeps the worker's megabyte buffers in its heap (``orbitmq.malloc_tuning``): a read
receives pull bodies of up to 8 MiB and decodes each into a body column as big, and glibc maps
every such buffer anew. Faulting their pages in cost a reader 0.3 page faults and about 0.5 us
of CPU per 1 KiB row, a third of its work.

This module imports nothing of OrbitMQ (it must load where OrbitMQ does not).
"""

from __future__ import annotations

import gc
import importlib
import os
import pickle
import socket
import sys
from types import ModuleType
from typing import Any

__all__ = ["ship", "revive", "require_orbitmq", "MISSING", "send_by_value", "freeze_heap"]

MISSING = ("orbitmq is not installed in this Spark Python ({python} on {host}): set PYSPARK_PYTHON "
           "(spark.pyspark.python) to an interpreter that has it, or ship it to the executors "
           "(docs/spark.md, 'Running on a cluster')")


def require_orbitmq() -> None:
    """Raise a one-line RuntimeError when the ``orbitmq`` package cannot be imported here."""
    try:
        importlib.import_module("orbitmq")
    except ModuleNotFoundError as e:
        if (e.name or "").partition(".")[0] != "orbitmq":
            raise
        raise RuntimeError(MISSING.format(python=sys.executable, host=socket.gethostname())) from None


def revive(module: str, qualname: str, state: bytes) -> Any:
    """A shipped object back in this process (see the module docstring)."""
    require_orbitmq()
    from orbitmq.malloc_tuning import tune_malloc

    tune_malloc()
    cls: Any = importlib.import_module(module)
    for part in qualname.split("."):
        cls = getattr(cls, part)
    obj = cls.__new__(cls)
    obj.__dict__.update(pickle.loads(state))
    freeze_heap()
    return obj


def freeze_heap() -> None:
    """Move every object of this process to the collector's permanent generation, once.

    PySpark's daemon runs a full ``gc.collect()`` in a Python worker after every task, and a
    worker holding pyspark, pyarrow and OrbitMQ has about 80,000 objects: 50-100 ms of CPU per
    task on the 2-core test machine, as much as reading 25,000 rows. Frozen, the modules and
    classes loaded by the first task are no longer scanned; later collections see only what
    tasks create. The objects of the task running now are frozen too and never freed: a bounded
    cost, paid once per worker process. Only where Spark reuses workers (the daemon's
    ``SPARK_REUSE_WORKER``): elsewhere, a driver or a test included, nothing is frozen. The
    freeze count is the flag because this function travels by value and has no module state of
    its own in the worker."""
    if os.environ.get("SPARK_REUSE_WORKER") and gc.get_freeze_count() == 0:
        gc.collect()
        gc.freeze()


def ship(obj: Any) -> tuple[Any, ...]:
    """``obj.__reduce__``: pickle ``obj`` as :func:`revive` of its class and its state."""
    from pyspark import cloudpickle

    kind = type(obj)
    return revive, (kind.__module__, kind.__qualname__, cloudpickle.dumps(dict(obj.__dict__)))


def send_by_value(*modules: ModuleType) -> None:
    """Have cloudpickle (PySpark's) carry these modules' functions and classes by value."""
    from pyspark import cloudpickle

    for module in modules:
        cloudpickle.register_pickle_by_value(module)


send_by_value(sys.modules[__name__])
