"""The index directory: built in a temporary sibling, renamed into place when complete, described by manifest.json,
and opened for search (:class:`Index`).

A crash, an interrupt, a kill or bad input never leaves a half-built index where a good one stood: the build writes
to ``<out>.building-<pid>`` and only a finished build (every component written, manifest included) takes ``<out>``'s
place, in one step where the system can (Linux's ``renameat2`` exchanging the two directories; ctypes, since Python
exposes no such call): a process killed at any instant leaves the old index or the new one at ``<out>``, never
neither. Elsewhere two renames, and a build killed between them leaves the old index at ``<out>.replaced-<pid>``,
which the next build over ``<out>`` puts back before it starts. What killed builds leave behind is removed by the
next one. The manifest lists each component with a checksum over its files, verified when an index is opened.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any

from weir.core import jvm
from weir.core.types import Document, InputError

MANIFEST = "manifest.json"
FORMAT_VERSION = 1


def tree_checksum(path: Path) -> tuple[str, int, int]:
    """sha256 over the relative names and contents of every file below ``path``: (hex digest, files, bytes)."""
    digest = hashlib.sha256()
    files = size = 0
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        rel = file.relative_to(path).as_posix()
        if rel == "write.lock":  # Lucene's lock file: empty and incidental
            continue
        digest.update(rel.encode() + b"\0")
        with open(file, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        files += 1
        size += file.stat().st_size
    return digest.hexdigest(), files, size


RENAME_EXCHANGE = 2  # linux/fs.h


def exchange(a: Path, b: Path) -> bool:
    """Swap directories ``a`` and ``b`` in one step (``renameat2(..., RENAME_EXCHANGE)``); False where the system
    has no such call or the file system refuses it (the caller then renames twice)."""
    import ctypes

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_cwd = -100  # AT_FDCWD
    return renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), RENAME_EXCHANGE) == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover(out: Path) -> None:
    """Undo what builds over ``out`` that were killed left: the old index put back at ``out`` when a build died
    between its two renames, and the directories of dead builds removed (a living build's are left alone)."""
    out = Path(out).absolute()
    if not out.parent.is_dir():
        return
    for sibling in sorted(out.parent.glob(f"{out.name}.replaced-*")) + sorted(out.parent.glob(f"{out.name}.building-*")):
        pid = sibling.name.rsplit("-", 1)[1]
        if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
            continue
        if ".replaced-" in sibling.name and not out.exists() and not out.is_symlink():
            os.replace(sibling, out)  # the index that stood there before the killed build
        elif sibling.is_symlink():
            sibling.unlink()
        else:
            shutil.rmtree(sibling, ignore_errors=True)


@contextmanager
def staged_directory(out: Path, *, overwrite: bool):
    """Yield a temporary sibling of ``out`` to build into; on success put it in ``out``'s place (one exchange where
    the system can, see the module's docstring), on failure remove it. What killed builds left is undone first."""
    out = Path(out).absolute()
    recover(out)
    if out.exists() and not overwrite:
        raise InputError(f"{out} already exists; pass --overwrite to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.building-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out.is_dir() and not out.is_symlink() and exchange(tmp, out):
        shutil.rmtree(tmp, ignore_errors=True)  # the old index, under the build's name since the exchange
        return
    old = out.with_name(f"{out.name}.replaced-{os.getpid()}")
    if out.exists() or out.is_symlink():
        os.replace(out, old)
    os.replace(tmp, out)
    if old.is_symlink():  # ``out`` was a link: the link is replaced, what it pointed to is left alone
        old.unlink()
    else:
        shutil.rmtree(old, ignore_errors=True)


def write_manifest(directory: Path, manifest: dict[str, Any], *, name: str = MANIFEST) -> None:
    with open(directory / name, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, sort_keys=False)
        f.write("\n")


def read_manifest(directory: str | os.PathLike) -> dict[str, Any]:
    path = Path(directory) / MANIFEST
    if not path.is_file():
        raise InputError(f"{directory}: not a weir index (no {MANIFEST}); build one with `weir index build`")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: malformed manifest ({e})") from None
    if manifest.get("format_version") != FORMAT_VERSION:
        raise InputError(f"{path}: index format {manifest.get('format_version')!r}, this weir reads {FORMAT_VERSION}")
    return manifest


def verify(directory: str | os.PathLike, manifest: dict[str, Any] | None = None) -> dict[str, Any]:
    """Check every component's checksum against the manifest; raise :class:`InputError` naming the first mismatch."""
    directory = Path(directory)
    manifest = manifest or read_manifest(directory)
    checked = dict(manifest["components"])
    if "pruning" in manifest:
        checked["quality (pruning)"] = manifest["pruning"]
    for name, component in checked.items():
        path = directory / component["path"]
        if not path.exists():
            raise InputError(f"{directory}: component {name!r} is missing ({path})")
        digest, _, _ = tree_checksum(path)
        if digest != component["sha256"]:
            raise InputError(f"{directory}: component {name!r} does not match its manifest checksum (modified or corrupt)")
    return manifest


def upgrade(directory: str | os.PathLike, add: tuple[str, ...] = (), learned: dict | None = None) -> list[str]:
    """Give an index built by an earlier weir what it lacks, in place: every Lucene component its ``postings/``
    arrays (:mod:`weir.indexer.postings`), the BM25 component its document store (:mod:`weir.indexer.docstore`).
    Each component is checked against its manifest checksum first, then exported, re-checksummed, and the manifest
    replaced atomically. ``add``: components to add that need no rebuild of the others (``attention``: the passage
    states, :func:`weir.indexer.document_pass.add_states`; ``learned``: its backend and device). Returns what was
    stored, as "component: what" (nothing when the index is up to date)."""
    from weir.indexer.docstore import write_documents
    from weir.indexer.postings import write_postings

    directory = Path(directory)
    manifest = read_manifest(directory)
    upgraded = []
    for name, component in manifest["components"].items():
        if not str(component.get("type", "")).startswith("lucene-"):
            continue
        missing = [("postings_arrays", "postings", write_postings)] if "postings_arrays" not in component else []
        if name == "bm25" and "document_store" not in component:
            missing.append(("document_store", "document store", write_documents))
        if not missing:
            continue
        path = directory / component["path"]
        digest, _, _ = tree_checksum(path)
        if digest != component["sha256"]:
            raise InputError(f"{directory}: component {name!r} does not match its manifest checksum (modified or "
                             "corrupt); rebuild the index")
        for field, what, write in missing:
            component[field] = write(path)
            upgraded.append(f"{name}: {what}")
        component["sha256"], component["files"], component["bytes"] = tree_checksum(path)
    for name in add:
        if name != "attention":
            raise InputError(f"`weir index upgrade --with` adds the attention component only; {name!r} is built by "
                             "`weir index build --with`")
        if name in manifest["components"]:
            continue
        from weir.indexer.document_pass import add_states

        entry = add_states(directory, learned)
        entry["sha256"], entry["files"], entry["bytes"] = tree_checksum(directory / entry["path"])
        manifest["components"][name] = entry
        upgraded.append(f"{name}: passage states of {entry['passages']} passages")
    if upgraded:
        tmp = directory / f"{MANIFEST}.tmp-{os.getpid()}"
        write_manifest(directory, manifest, name=tmp.name)
        os.replace(tmp, directory / MANIFEST)
    return upgraded


class Timer:
    def __init__(self):
        self.start = time.perf_counter()

    @property
    def seconds(self) -> float:
        return round(time.perf_counter() - self.start, 3)


class Step:
    """A build step measured: its wall seconds and this process's resident memory while it ran: the peak of all of it
    (``peak_rss_mib``: Linux's high-water mark where the step raised it, else the largest sample), and of its anonymous
    part (``peak_anon_mib``, sampled every :attr:`interval` seconds: what the step holds, without the pages of files it
    maps, such as Lucene's segments, which the kernel can drop). The process's own high-water mark is left as it is,
    so that whoever measures the whole build from outside (``time -v``, ``ru_maxrss``) still sees it. Memory of child
    processes (Ray workers) is not counted. A finished step is appended to ``steps`` as ``{"step", "seconds",
    "peak_rss_mib", "peak_anon_mib"}``."""

    interval = 0.02

    def __init__(self, name: str, steps: list[dict]):
        self.name, self.steps = name, steps
        self.peak = {"VmRSS": 0, "RssAnon": 0}
        self._done = threading.Event()

    def __enter__(self) -> Step:
        self.hwm = _status_kib().get("VmHWM", 0)
        self._sample()
        self._sampler = threading.Thread(target=self._run, name=f"step {self.name}", daemon=True)
        self._sampler.start()
        self.timer = Timer()
        return self

    def _sample(self) -> None:
        now = _status_kib()
        for key in self.peak:
            self.peak[key] = max(self.peak[key], now.get(key, 0))

    def _run(self) -> None:
        while not self._done.wait(self.interval):
            self._sample()

    def __exit__(self, kind, error, traceback) -> None:
        seconds = self.timer.seconds
        self._done.set()
        self._sampler.join()
        self._sample()
        if kind is None:
            hwm = _status_kib().get("VmHWM", 0)
            peak = hwm if hwm > self.hwm else self.peak["VmRSS"]
            self.steps.append({"step": self.name, "seconds": seconds, "peak_rss_mib": peak // 1024,
                               "peak_anon_mib": self.peak["RssAnon"] // 1024})


def _status_kib() -> dict[str, int]:
    """The memory lines of ``/proc/self/status`` (KiB); empty where there is none."""
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return {}
    return {line.split(":")[0]: int(line.split()[1]) for line in text.splitlines()
            if line.startswith(("VmRSS", "VmHWM", "RssAnon"))}


class Index:
    """An index directory built by ``weir index build``, opened: its manifest, its components' paths, and the stored
    documents. ``verify_checksums=True`` checks every component's checksum first."""

    def __init__(self, path: str | os.PathLike, *, verify_checksums: bool = False):
        self.path = Path(path)
        self.manifest = read_manifest(self.path)
        if verify_checksums:
            verify(self.path, self.manifest)
        self._postings: dict[str, Any] = {}
        self._postings_lock = threading.Lock()

    @property
    def components(self) -> list[str]:
        return list(self.manifest["components"])

    def component(self, name: str) -> dict:
        """The manifest's entry of component ``name``; an index without it is refused with the components it has."""
        if name not in self.manifest["components"]:
            raise InputError(
                f"{self.path}: this index has no {name!r} component (it has: {', '.join(self.components)}); "
                f"rebuild it with `weir index build --with {name}`"
            )
        return self.manifest["components"][name]

    def component_path(self, name: str) -> Path:
        return self.path / self.component(name)["path"]

    def postings(self, component: str):
        """The postings of a Lucene component (:class:`weir.indexer.postings.Postings`), loaded once per opened index and
        shared by every stage that searches it."""
        from weir.indexer.postings import open_postings

        with self._postings_lock:
            if component not in self._postings:
                self._postings[component] = open_postings(self.component_path(component))
            return self._postings[component]

    @cached_property
    def lucene(self):
        """The pyserini searcher over the BM25 index (also the store of raw documents)."""
        jvm.ensure()
        from pyserini.search.lucene import LuceneSearcher

        with jvm.lock:
            return LuceneSearcher(str(self.component_path("bm25")))

    @cached_property
    def docstore(self):
        """The stored documents of the BM25 component as arrays (:mod:`weir.indexer.docstore`), None for an index
        built before weir stored them (its documents are then read from Lucene)."""
        from weir.indexer.docstore import DocumentStore
        from weir.indexer.lucene import read_docid_table

        path = self.component_path("bm25")
        if not DocumentStore.exists(path):
            return None
        return DocumentStore(path, read_docid_table(path))

    def documents(self, doc_ids: list[str], threads: int = 4) -> dict[str, Document]:
        """Title and text of the given documents (those the index holds), from the document store of the BM25
        component, or from the raw documents Lucene stores in an index built without one."""
        if self.docstore is not None:
            return self.docstore.get(doc_ids)
        return self._lucene_documents(doc_ids, threads)

    @jvm.serialized
    def _lucene_documents(self, doc_ids: list[str], threads: int) -> dict[str, Document]:
        from weir.indexer.docstore import title_and_text

        found = self.lucene.batch_doc(list(dict.fromkeys(doc_ids)), threads)
        return {doc_id: Document(doc_id, *title_and_text(doc.raw())) for doc_id, doc in found.items()}

    @cached_property
    def passage_states(self):
        """The ``attention`` component's passage states (:class:`weir.indexer.passage_states.PassageStates`), None
        for an index without one."""
        if "attention" not in self.components:
            return None
        from weir.indexer.passage_states import PassageStates

        return PassageStates(self.component_path("attention"))

    @property
    def num_docs(self) -> int:
        return self.manifest["counts"]["documents"]

    @property
    def pruning(self) -> dict | None:
        """The manifest's record of static pruning (estimator, fraction or threshold, counts), None if unpruned."""
        return self.manifest.get("pruning")
