"""A file system that forgets what was not synced: power loss for real processes.

``python -m orbitmq.testing.lazyfs BACKING MOUNT --control SOCKET`` mounts, over FUSE, a
passthrough of directory ``BACKING`` at ``MOUNT`` that keeps every written byte in its own memory
(4 KiB pages overlaid on the backing file for reads) until an ``fsync`` or ``fdatasync`` of that
file writes them through, as a disk's volatile cache and the page cache together would. A
process on top uses its real system calls: ``write``, ``mmap`` with ``MAP_SHARED`` (dirty pages of
a mapping reach the layer as WRITEs when the kernel writes them back, on ``msync``/``fdatasync``
or on its own schedule, which makes nothing durable), ``fdatasync``, ``posix_fallocate``. A close
persists nothing (a real disk does not either).

Metadata is durable at once: creating, renaming and removing files and directories, truncating,
allocating (``fallocate``), as on a journalled file system whose metadata commit came first.
``syncfs(2)`` does not reach a FUSE file system (the kernel sends FUSE_SYNCFS to virtiofs only):
data a process makes durable with ``syncfs`` alone is dropped by a power cut here, a stricter
disk than the real one (nothing in the store relies on it below FS_SYNC_QUEUES_MIN queues).

The control socket (one line in, one line out; :class:`LazyFs` speaks it) takes:

- ``power_cut [SEED]``: drop everything not synced, at once; with a seed, tear one file first
  (the seeded choice of the files with unsynced data): a seeded number of 512-byte sectors of its
  unsynced pages, in offset order, reach the disk, the rest do not. From then on every operation
  fails with EIO (the disk is gone): the harness kills the processes on top with SIGKILL, then
  this process, unmounts and mounts again for the restart (:meth:`LazyFs.remount`).
- ``stall SECONDS``: every file operation blocks until ``clear`` or for SECONDS at most.
- ``full``: writes and allocations fail with ENOSPC (until ``clear``); ``statfs`` says no space.
- ``clear``: end a stall and a full disk.
- ``status``: a JSON line: unsynced bytes and files, cuts, what the last cut dropped.

Needs ``/dev/fuse``, libfuse 3 (Debian: fuse3) and the ``mfusepy`` package (the ``chaos``
extra), and root or ``fusermount3``; :func:`lazyfs_problem` says what is missing.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["LazyFs", "lazyfs_problem", "PAGE", "SECTOR", "STALL_MAX_S", "MOUNT_WAIT_S"]

PAGE = 4096
SECTOR = 512  # what a torn write keeps whole: a disk writes sectors atomically, not pages
STALL_MAX_S = 120.0  # the longest stall a command may ask for
MOUNT_WAIT_S = 20.0  # bound of the wait for a mount (or an unmount) to show
COMMAND_WAIT_S = 10.0  # bound of a control command's answer
FUSE_CAP_AUTO_INVAL_DATA = 1 << 12  # libfuse's fuse_common.h
UNIX_PATH_MAX = 100  # a unix socket's path must fit sockaddr_un (108 bytes on Linux)


def lazyfs_problem() -> str | None:
    """Why this machine cannot mount the layer (None: it can)."""
    if not sys.platform.startswith("linux"):
        return "FUSE power loss needs Linux"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing (a container without FUSE)"
    try:
        import mfusepy  # noqa: F401
    except ImportError as e:
        return f"the mfusepy package is missing (pip install -e '.[chaos]'): {e}"
    except OSError as e:  # mfusepy loads libfuse when imported
        return f"libfuse is missing (Debian: apt-get install fuse3): {e}"
    if os.geteuid() != 0 and shutil.which("fusermount3") is None:
        return "not root and no fusermount3 (Debian: apt-get install fuse3)"
    return None


@dataclasses.dataclass
class _File:
    """What one file holds that its backing file does not: pages not synced, and its size."""

    size: int
    pages: dict[int, bytearray] = dataclasses.field(default_factory=dict)

    def unsynced(self) -> int:
        return len(self.pages) * PAGE


class LazyCache:
    """The layer's state over ``backing``: the unsynced pages per file (by path) and the fault
    switches. The FUSE operations call it; it knows nothing of FUSE, so it holds the logic a
    test could check alone."""

    def __init__(self, backing: str) -> None:
        self.backing = os.path.realpath(backing)
        self.lock = threading.Lock()
        self.files: dict[str, _File] = {}
        self.cut = False
        self.cuts = 0
        self.last_cut: dict[str, object] = {}
        self.full = False
        self._stall_until = 0.0
        self._stall_cond = threading.Condition()

    def real(self, path: str) -> str:
        return self.backing + path

    # --- faults -----------------------------------------------------------------------------

    def gate(self) -> None:
        """Each operation's first step: wait out a stall, fail once the power is cut."""
        with self._stall_cond:
            while True:
                left = self._stall_until - time.monotonic()
                if left <= 0:
                    break
                self._stall_cond.wait(left)
        if self.cut:
            raise OSError(errno.EIO, "the power is cut")

    def stall(self, seconds: float) -> None:
        with self._stall_cond:
            self._stall_until = time.monotonic() + seconds
            self._stall_cond.notify_all()

    def clear(self) -> None:
        with self._stall_cond:
            self._stall_until = 0.0
            self._stall_cond.notify_all()
        self.full = False

    def no_space(self) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, "the disk is full")

    def power_cut(self, tear_seed: int | None) -> dict[str, object]:
        """Drop every unsynced page (after tearing one file when ``tear_seed`` is given)."""
        with self.lock:
            self.cut = True
            self.cuts += 1
            torn: dict[str, object] = {}
            dirty = sorted(p for p, f in self.files.items() if f.pages)
            if tear_seed is not None and dirty:
                rng = random.Random(tear_seed)
                path = rng.choice(dirty)
                f = self.files[path]
                total = f.unsynced() // SECTOR
                keep = rng.randint(0, total) * SECTOR
                torn = {"path": path, "kept_bytes": keep, "unsynced_bytes": f.unsynced()}
                self._persist(path, f, keep)
            dropped = sum(f.unsynced() for f in self.files.values())
            self.last_cut = {"dropped_bytes": dropped, "dropped_files": len(dirty),
                             "torn": torn}
            self.files.clear()
            return self.last_cut

    def status(self) -> dict[str, object]:
        with self.lock:
            return {"unsynced_bytes": sum(f.unsynced() for f in self.files.values()),
                    "unsynced_files": sum(1 for f in self.files.values() if f.pages),
                    "cut": self.cut, "cuts": self.cuts, "last_cut": self.last_cut,
                    "full": self.full, "stalled": self._stall_until > time.monotonic()}

    # --- data -------------------------------------------------------------------------------

    def size_of(self, path: str, backing_size: int) -> int:
        with self.lock:
            f = self.files.get(path)
            return f.size if f is not None else backing_size

    def read(self, path: str, fd: int, size: int, offset: int) -> bytes:
        with self.lock:
            f = self.files.get(path)
            file_size = f.size if f is not None else os.fstat(fd).st_size
            end = min(offset + size, file_size)
            if end <= offset:
                return b""
            data = bytearray(os.pread(fd, end - offset, offset))
            if len(data) < end - offset:
                data.extend(bytes(end - offset - len(data)))
            if f is not None and f.pages:
                for index in range(offset // PAGE, (end - 1) // PAGE + 1):
                    page = f.pages.get(index)
                    if page is None:
                        continue
                    start = index * PAGE
                    lo, hi = max(start, offset), min(start + PAGE, end)
                    data[lo - offset:hi - offset] = page[lo - start:hi - start]
            return bytes(data)

    def write(self, path: str, fd: int, data: bytes, offset: int) -> int:
        self.no_space()
        with self.lock:
            f = self.files.get(path)
            if f is None:
                f = self.files[path] = _File(os.fstat(fd).st_size)
            at, view = offset, memoryview(data)
            while view:
                index, within = divmod(at, PAGE)
                page = f.pages.get(index)
                if page is None:
                    page = bytearray(os.pread(fd, PAGE, index * PAGE))
                    page.extend(bytes(PAGE - len(page)))
                    # Bytes past the file's size read as zeros, whatever the backing file holds.
                    if f.size < (index + 1) * PAGE:
                        keep = max(0, f.size - index * PAGE)
                        page[keep:] = bytes(PAGE - keep)
                    f.pages[index] = page
                n = min(PAGE - within, len(view))
                page[within:within + n] = view[:n]
                view = view[n:]
                at += n
            f.size = max(f.size, offset + len(data))
            return len(data)

    def fsync(self, path: str) -> None:
        with self.lock:
            f = self.files.get(path)
            if f is None:
                return
            self.no_space()  # pages taken before the disk ran full cannot be written now
            del self.files[path]
            self._persist(path, f, None)

    def persist_all(self) -> None:
        """A clean unmount: what the processes wrote reaches the disk (as an orderly shutdown
        syncs), unless the power was cut."""
        with self.lock:
            if self.cut:
                return
            for path, f in self.files.items():
                with contextlib.suppress(OSError):
                    self._persist(path, f, None)
            self.files.clear()

    def _persist(self, path: str, f: _File, limit: int | None) -> None:
        """Write ``f``'s pages through (the first ``limit`` bytes of them, in offset order, when
        given: a torn write). The backing file itself is not fsynced: it is the disk's image, and
        only this layer's memory is lost by a simulated cut."""
        fd = os.open(self.real(path), os.O_WRONLY)
        try:
            left = limit
            for index in sorted(f.pages):
                start = index * PAGE
                n = min(PAGE, f.size - start)
                if n <= 0:
                    continue
                if left is not None:
                    n = min(n, left)
                    left -= n
                if n > 0:
                    os.pwrite(fd, f.pages[index][:n], start)
                if left is not None and left <= 0:
                    break
            if limit is None and os.fstat(fd).st_size < f.size:
                os.ftruncate(fd, f.size)
        finally:
            os.close(fd)

    def truncate(self, path: str, length: int) -> None:
        with self.lock:
            f = self.files.get(path)
            os.truncate(self.real(path), length)  # a longer file is a hole: no space needed
            if f is None:
                return
            for index in [i for i in f.pages if i * PAGE >= length]:
                del f.pages[index]
            index, within = divmod(length, PAGE)
            page = f.pages.get(index)
            if page is not None and within:
                page[within:] = bytes(PAGE - within)
            f.size = length
            if not f.pages:
                del self.files[path]

    def allocate(self, path: str, fd: int, offset: int, length: int) -> None:
        self.no_space()
        with self.lock:
            os.posix_fallocate(fd, offset, length)
            f = self.files.get(path)
            if f is not None:
                f.size = max(f.size, offset + length)

    def forget(self, path: str) -> None:
        with self.lock:
            self.files.pop(path, None)
            prefix = path.rstrip("/") + "/"
            for p in [p for p in self.files if p.startswith(prefix)]:
                del self.files[p]

    def rename(self, old: str, new: str) -> None:
        with self.lock:
            os.rename(self.real(old), self.real(new))
            self.files.pop(new, None)
            moved = {p: f for p, f in self.files.items() if p == old or p.startswith(old + "/")}
            for p, f in moved.items():
                del self.files[p]
                self.files[new + p[len(old):]] = f


def _operations(cache: LazyCache) -> Any:
    """The FUSE operations over ``cache`` (mfusepy's high-level API: paths, file handles)."""
    import mfusepy as fuse

    def guarded(fn: Any) -> Any:
        def call(self: Any, *args: Any) -> Any:
            try:
                cache.gate()
                return fn(self, *args)
            except OSError as e:
                raise fuse.FuseOSError(e.errno or errno.EIO) from None
        call.__name__ = fn.__name__
        return call

    stat_keys = ("st_atime_ns", "st_ctime_ns", "st_mtime_ns", "st_gid", "st_uid", "st_mode",
                 "st_nlink", "st_size", "st_ino", "st_blocks", "st_blksize")

    class Lazy(fuse.Operations):
        use_ns = True

        @guarded
        def getattr(self, path: str, fh: int | None = None) -> dict[str, int]:
            st = os.fstat(fh) if fh is not None else os.lstat(cache.real(path))
            out = {k.removesuffix("_ns"): getattr(st, k) for k in stat_keys}
            if (st.st_mode & 0o170000) == 0o100000:
                out["st_size"] = cache.size_of(path, st.st_size)
            return out

        @guarded
        def access(self, path: str, amode: int) -> int:
            if not os.access(cache.real(path), amode):
                raise OSError(errno.EACCES, "access")
            return 0

        @guarded
        def readdir(self, path: str, fh: int) -> list[str]:
            return [".", "..", *os.listdir(cache.real(path))]

        @guarded
        def mkdir(self, path: str, mode: int) -> int:
            os.mkdir(cache.real(path), mode)
            return 0

        @guarded
        def rmdir(self, path: str) -> int:
            os.rmdir(cache.real(path))
            cache.forget(path)
            return 0

        @guarded
        def unlink(self, path: str) -> int:
            os.unlink(cache.real(path))
            cache.forget(path)
            return 0

        @guarded
        def rename(self, old: str, new: str, *flags: Any) -> int:
            cache.rename(old, new)
            return 0

        @guarded
        def chmod(self, path: str, mode: int, *rest: Any) -> int:
            os.chmod(cache.real(path), mode)
            return 0

        @guarded
        def chown(self, path: str, uid: int, gid: int, *rest: Any) -> int:
            os.chown(cache.real(path), uid, gid)
            return 0

        @guarded
        def utimens(self, path: str, times: Any = None, *rest: Any) -> int:
            if times is not None:
                os.utime(cache.real(path), ns=tuple(times))
            else:
                os.utime(cache.real(path))
            return 0

        @guarded
        def readlink(self, path: str) -> str:
            return os.readlink(cache.real(path))

        @guarded
        def symlink(self, target: str, source: str) -> int:
            os.symlink(source, cache.real(target))
            return 0

        @guarded
        def statfs(self, path: str) -> dict[str, int]:
            st = os.statvfs(cache.real(path))
            out = {k: getattr(st, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize",
                                                "f_favail", "f_ffree", "f_files", "f_flag",
                                                "f_frsize", "f_namemax")}
            if cache.full:
                out["f_bavail"] = out["f_bfree"] = 0
            return out

        @guarded
        def create(self, path: str, mode: int, *rest: Any) -> int:
            return os.open(cache.real(path), os.O_RDWR | os.O_CREAT, mode)

        @guarded
        def open(self, path: str, flags: int) -> int:
            try:
                return os.open(cache.real(path), os.O_RDWR)
            except PermissionError:
                return os.open(cache.real(path), os.O_RDONLY)

        @guarded
        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            return cache.read(path, fh, size, offset)

        @guarded
        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            return cache.write(path, fh, bytes(data), offset)

        @guarded
        def truncate(self, path: str, length: int, fh: int | None = None) -> int:
            cache.truncate(path, length)
            return 0

        @guarded
        def fallocate(self, path: str, mode: int, offset: int, length: int, fh: int) -> int:
            if mode != 0:
                raise OSError(errno.EOPNOTSUPP, "fallocate mode")
            cache.allocate(path, fh, offset, length)
            return 0

        @guarded
        def fsync(self, path: str, datasync: int, fh: int) -> int:
            cache.fsync(path)
            return 0

        @guarded
        def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
            return 0  # names are durable at once

        def flush(self, path: str, fh: int) -> int:
            return 0  # a close persists nothing

        def release(self, path: str, fh: int) -> int:
            with contextlib.suppress(OSError):
                os.close(fh)
            return 0

        def destroy(self, path: str) -> None:
            cache.persist_all()

        def init_with_config(self, conn: Any, config: Any) -> None:
            # No FUSE_CAP_AUTO_INVAL_DATA: with it the kernel drops a file's cached pages
            # whenever the mtime it holds differs from getattr's (here after every write
            # through to the backing file), clean ones included; a page whose write-back
            # failed is clean while holding data no disk has, and would be read back stale.
            # A local file system never drops such a page behind the writer's back (only
            # memory pressure could): the layer keeps to that.
            if conn is not None:
                conn.want &= ~FUSE_CAP_AUTO_INVAL_DATA

    return Lazy()


def _serve_control(cache: LazyCache, path: str) -> None:
    """The control socket: one command per connection, one line back."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(8)

    def loop() -> None:
        while True:
            conn, _ = server.accept()
            with conn:
                conn.settimeout(COMMAND_WAIT_S)
                try:
                    line = conn.makefile("r").readline().strip()
                    answer = _command(cache, line)
                except (OSError, ValueError) as e:
                    answer = f"error {e}"
                with contextlib.suppress(OSError):
                    conn.sendall(answer.encode() + b"\n")

    threading.Thread(target=loop, name="lazyfs-control", daemon=True).start()


def _command(cache: LazyCache, line: str) -> str:
    words = line.split()
    if not words:
        return "error empty command"
    name, args = words[0], words[1:]
    if name == "ping":
        return "ok"
    if name == "power_cut":
        seed = int(args[0]) if args else None
        return "ok " + json.dumps(cache.power_cut(seed))
    if name == "stall":
        seconds = float(args[0]) if args else -1.0
        if not 0 < seconds <= STALL_MAX_S:
            return f"error stall takes seconds in (0, {STALL_MAX_S:g}]"
        cache.stall(seconds)
        return "ok"
    if name == "full":
        cache.full = True
        return "ok"
    if name == "clear":
        cache.clear()
        return "ok"
    if name == "status":
        return "ok " + json.dumps(cache.status())
    return f"error unknown command {name!r} (power_cut [SEED], stall S, full, clear, status)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orbitmq.testing.lazyfs",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("backing", help="the directory that plays the disk")
    parser.add_argument("mount", help="where the layer is mounted")
    parser.add_argument("--control", required=True, help="the control socket's path")
    args = parser.parse_args(argv)
    problem = lazyfs_problem()
    if problem is not None:
        print(f"lazyfs: {problem}", file=sys.stderr)
        return 2
    import mfusepy as fuse

    cache = LazyCache(args.backing)
    _serve_control(cache, args.control)
    # kernel_cache: an open keeps the kernel's pages of the file (every access goes through this
    # mount, so they cannot be stale); without it each open would drop them, and the store opens
    # a segment for each sync.
    fuse.FUSE(_operations(cache), args.mount, foreground=True, nothreads=False,
              kernel_cache=True, fsname="lazyfs", subtype="lazyfs")
    return 0


class LazyFs:
    """The layer as a child process: mounted at ``mount`` over ``backing`` while it lives.

    A power cut is :meth:`power_cut`, then SIGKILL of every process using the mount (the
    caller's part), then :meth:`remount`.
    """

    def __init__(self, backing: Path, mount: Path, *, control: Path | None = None) -> None:
        self.backing = Path(backing)
        self.mount = Path(mount)
        self.control = Path(control) if control else self.mount.parent / f".{self.mount.name}.ctl"
        if len(str(self.control)) >= UNIX_PATH_MAX:  # too long for a socket's address
            self.control = Path(tempfile.mkdtemp(prefix="lazyfs-")) / "ctl"
        self.log = self.mount.parent / f".{self.mount.name}.log"
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mount.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        """Mount (again): a new process over the same backing directory, an empty cache."""
        # Its output goes to a file, never a pipe: a pipe nobody reads would fill and stop the
        # file system, and every process on top with it.
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "orbitmq.testing.lazyfs", str(self.backing),
                 str(self.mount), "--control", str(self.control)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + MOUNT_WAIT_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"lazyfs exited with {self.proc.returncode}: "
                                   f"{self.output()[-2000:].strip()}")
            if _is_mounted(self.mount) and self._try("ping") == "ok":
                return
            if time.monotonic() > deadline:
                self._kill()
                raise RuntimeError(f"lazyfs not mounted at {self.mount} within {MOUNT_WAIT_S} s")
            time.sleep(0.05)

    def output(self) -> str:
        """What the layer's processes printed (libfuse's complaints, Python's tracebacks)."""
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def _try(self, line: str) -> str | None:
        try:
            return self.command(line)
        except OSError:
            return None

    def command(self, line: str) -> str:
        """Send one control command; returns the answer line (raises OSError on no answer)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(COMMAND_WAIT_S)
            s.connect(str(self.control))
            s.sendall(line.encode() + b"\n")
            answer = s.makefile("r").readline().strip()
        if answer.startswith("error"):
            raise ValueError(f"lazyfs {line!r}: {answer}")
        return answer

    def status(self) -> dict[str, Any]:
        return dict(json.loads(self.command("status").partition(" ")[2]))

    def power_cut(self, tear_seed: int | None = None) -> dict[str, Any]:
        """Drop what is not synced (and tear one file with ``tear_seed``); the mount fails every
        operation from here until :meth:`remount`. Returns what the cut dropped."""
        answer = self.command("power_cut" + (f" {tear_seed}" if tear_seed is not None else ""))
        return dict(json.loads(answer.partition(" ")[2]))

    def remount(self) -> None:
        """After a cut, once the processes on top are dead: end this process (what the kernel
        still held dirty for the mount goes with it), unmount, mount again."""
        self._kill()
        self.start()

    def stall(self, seconds: float) -> None:
        self.command(f"stall {seconds}")

    def full(self) -> None:
        self.command("full")

    def clear(self) -> None:
        self.command("clear")

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(MOUNT_WAIT_S)
        self._unmount()

    def _unmount(self) -> None:
        if not _is_mounted(self.mount):
            return
        for cmd in (["fusermount3", "-u", "-z", str(self.mount)], ["umount", "-l", str(self.mount)]):
            if shutil.which(cmd[0]) is None:
                continue
            subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=MOUNT_WAIT_S)
            if not _is_mounted(self.mount):
                return
        raise RuntimeError(f"cannot unmount {self.mount}")

    def close(self) -> None:
        """A clean unmount (what is unsynced is written through), then the process ends."""
        if self.proc is None:
            return
        if self.proc.poll() is None and _is_mounted(self.mount):
            cmd = (["umount"] if os.geteuid() == 0 or shutil.which("fusermount3") is None
                   else ["fusermount3", "-u"])
            subprocess.run([*cmd, str(self.mount)], stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=MOUNT_WAIT_S)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(MOUNT_WAIT_S)
        self._kill()
        self.proc = None
        with contextlib.suppress(OSError):
            self.control.unlink()

    def __enter__(self) -> LazyFs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_mounted(path: Path) -> bool:
    """Whether a file system is mounted at ``path`` (the mount table, not stat: the layer
    answers EIO after a cut, and a dead one ENOTCONN)."""
    target = os.path.realpath(path)
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as f:
            points = [line.split()[1].replace("\\040", " ") for line in f if line.strip()]
    except OSError:
        return os.path.ismount(path)
    return target in points


@contextlib.contextmanager
def mounted(backing: Path, mount: Path) -> Iterator[LazyFs]:
    """The layer mounted for a ``with`` block (closed cleanly at its end)."""
    fs = LazyFs(backing, mount)
    try:
        yield fs
    finally:
        fs.close()


if __name__ == "__main__":
    sys.exit(main())
