"""A preloaded interpreter for local jobs: each run's process is forked from one that has already
imported the model stack, instead of starting Python and importing torch, transformers and TRL anew.

A local ``run`` goes through submitit's local executor: per run, submitit starts a controller, which
starts the job's task, ``python -u -m submitit.core._submit FOLDER``, which unpickles
:class:`harness.cluster.executors.TrainingJob` and calls it. Most of that task's first seconds are
imports. Here the task is :func:`client` instead (``python -m harness.cluster.preload -u -m
submitit.core._submit FOLDER``: a Python start-up with nothing imported), which hands its command
line, working folder, environment and standard streams to a :class:`Server` started once per
``run`` (:func:`serving`). The server, which imported :data:`PRELOAD` once, forks a child for it;
the child takes the task's streams, folder, environment and command line and runs the module as
``python -m`` would. So the run still has a process of its own, which dies alone, and submitit's
controller still sees its task: the client passes every signal it gets on to the child (SIGTERM and
USR2 stop a run at its next step, :mod:`harness.cluster.stopping`), waits for it, and exits as it
exited; if the client dies (a SIGKILL from the controller or from a second Ctrl-C), the child sees
its end of a pipe close and kills itself.

Where no server answers (none started, or it has ended), the client runs the command itself with
``os.execv``: a plain start-up, as without the server.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shlex
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

#: The environment variable that gives a job's task the server's socket.
SOCKET_ENV = "GRPO_HARNESS_PRELOAD_SOCKET"
#: What the server imports once, in this order: the model stack and everything a run's process
#: imports before its first step.
PRELOAD = (
    "torch",
    "transformers",
    "trl",
    "datasets",
    "accelerate",
    "pandas",
    "pyarrow.parquet",
    "reasoning_gym",
    "submitit",
    "submitit.core.submission",
    "harness.train.training",
    "harness.train.trainer",
    "harness.train.recorder",
    "harness.cluster.executors",
    "analysis.settings",
    # imported by transformers and accelerate when installed (the trainer's start asks for them)
    "deepspeed",
    "peft",
)
#: Signals the client passes on to the child (SIGKILL cannot be caught: the child notices the
#: client's end instead).
FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGCONT,
)
_LEN = struct.Struct("!I")


def _send(sock: socket.socket, record: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(record).encode()
    payload = _LEN.pack(len(data)) + data
    if fds:
        socket.send_fds(sock, [payload], fds)
    else:
        sock.sendall(payload)


def _recv(sock: socket.socket, maxfds: int = 0) -> tuple[dict | None, list[int]]:
    """One record (and up to ``maxfds`` file descriptors) from ``sock``; ``(None, [])`` at its end."""
    if maxfds:
        head, fds, _, _ = socket.recv_fds(sock, _LEN.size, maxfds)
    else:
        head, fds = sock.recv(_LEN.size, socket.MSG_WAITALL), []
    if len(head) < _LEN.size:
        return None, fds
    (n,) = _LEN.unpack(head)
    body = b""
    while len(body) < n:
        chunk = sock.recv(n - len(body))
        if not chunk:
            return None, fds
        body += chunk
    return json.loads(body), fds


# --- the client: a job's task ------------------------------------------------------------------


def client(argv: list[str]) -> None:
    """Run ``python ARGV`` through the server named by :data:`SOCKET_ENV`, as if it ran here: the
    same exit code, or the same signal ends this process. Falls back to ``os.execv`` of the command
    when no server answers, or when it fails before the child is known. Never returns."""
    path = os.environ.get(SOCKET_ENV)
    sock = _connect(path) if path else None
    if sock is None:
        _run_here(argv)
    ignored = [s for s in FORWARDED if signal.getsignal(s) == signal.SIG_IGN]  # nohup's SIGHUP, ...
    passed = [s for s in FORWARDED if s not in ignored]
    # a signal that comes before the child is known waits, then is passed on (not lost, and not the
    # end of this process, which would end the child unasked)
    signal.pthread_sigmask(signal.SIG_BLOCK, passed)
    alive_r, alive_w = os.pipe()  # the child reads EOF when this process ends, however it ends
    request = {
        "argv": argv,
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "path": list(sys.path),  # what this command line would import from, run here
        "ignored": [int(s) for s in ignored],
    }
    try:
        _send(sock, request, [0, 1, 2, alive_r])
        reply, _ = _recv(sock)
    except OSError:  # the server ended while this request waited for it
        reply = None
    os.close(alive_r)
    if reply is None or "pid" not in reply:  # no child: run the command here instead
        signal.pthread_sigmask(signal.SIG_UNBLOCK, passed)
        _run_here(argv)
    child = _Child(int(reply["pid"]))
    for signum in passed:
        signal.signal(signum, lambda s, _f: child.signal(s))
    signal.signal(signal.SIGTSTP, lambda s, _f: child.pause())  # Ctrl-Z pauses the run too
    signal.pthread_sigmask(signal.SIG_UNBLOCK, passed)
    try:
        end, _ = _recv(sock)
    except OSError:
        end = None
    _exit_like(end or child.wait())


def _run_here(argv: list[str]) -> None:
    """Run the command in this process, as submitit would have started it. Never returns."""
    os.execv(sys.executable, [sys.executable, *argv])


class _Child:
    """The child the server forked for this client, held by a pid file descriptor where the
    platform has one (a signal never reaches another process that took the pid later)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.fd: int | None = None
        with contextlib.suppress(AttributeError, OSError):
            self.fd = os.pidfd_open(pid)

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, OSError):
            if self.fd is not None:
                signal.pidfd_send_signal(self.fd, signum)
            else:
                os.kill(self.pid, signum)

    def pause(self) -> None:
        """Ctrl-Z: stop the child, then this process (SIGCONT, passed on, resumes both)."""
        self.signal(signal.SIGSTOP)
        os.kill(os.getpid(), signal.SIGSTOP)

    def wait(self) -> dict:
        """Wait for the child's end when the server cannot say how it ended (it ended first):
        ``{"code": 0}`` once the child is gone (submitit reads the job's result file, not this code)."""
        while True:
            if self.fd is not None:
                select.select([self.fd], [], [])
                return {"code": 0}
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return {"code": 0}
            time.sleep(0.5)


def _connect(path: str, wait_s: float = 5.0) -> socket.socket | None:
    """A connection to the server at ``path``; while its folder exists but the socket does not yet
    (the server is starting), retried for up to ``wait_s`` seconds. None when nothing answers."""
    deadline = time.monotonic() + wait_s
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            return sock
        except OSError:
            sock.close()
        if not Path(path).parent.is_dir() or Path(path).exists() or time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def _exit_like(end: dict) -> None:
    """End this process as the child ended: ``{"code": n}`` or ``{"signal": n}``."""
    sys.stdout.flush(), sys.stderr.flush()
    if "signal" in end:
        signum = int(end["signal"])
        if signum not in (signal.SIGKILL, signal.SIGSTOP):  # neither can be given a handler
            signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
        os.kill(os.getpid(), signum)
        time.sleep(1)  # a signal that does not end a process by default
    os._exit(int(end.get("code", 1)))


# --- the server --------------------------------------------------------------------------------


class Server:
    """The preloaded interpreter's loop (in its own process: :func:`serving` starts it).

    Args:
        path: the Unix socket it listens on.
        parent_fd: the read end of a pipe the driver holds; when it closes (the driver ended, however
            it ended), the server takes no more requests, and ends once its children have.
        modules: what it imports before it serves (:data:`PRELOAD`).
    """

    def __init__(self, path: str, parent_fd: int, modules: tuple[str, ...] = PRELOAD):
        self.modules = modules
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the driver's to handle
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(64)
        self.parent_fd = parent_fd
        self.waiting: dict[int, socket.socket] = {}  # child pid -> its client's connection
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)

    def preload(self) -> bool:
        """Import its modules (clients that connect meanwhile wait in the socket's backlog); one that
        is not installed, or fails to import, is left to the runs that need it. False, and the
        socket closed (clients then start as without a server), when an import started CUDA, which
        a forked child could not use."""
        import importlib

        # torch.cuda.is_available() (asked by deepspeed at import) must not start CUDA here
        os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
        for name in self.modules:
            try:
                importlib.import_module(name)
            except Exception as e:  # an optional package, or one the runs will report themselves
                print(f"preload: {name} not imported ({type(e).__name__}: {e})", file=sys.stderr, flush=True)
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            print("preload: an import started CUDA; serving nothing", file=sys.stderr, flush=True)
            self.listener.close()
            return False
        print(f"preload: ready, {threading.active_count()} thread(s)", file=sys.stderr, flush=True)
        return True

    def serve(self) -> None:
        """Fork a child per request until the driver's pipe closes, then wait for the children;
        tell each client how its child ended. A request that fails is its client's alone."""
        accepting = True
        while accepting or self.waiting:
            watched = [self.wake_r, *([self.listener, self.parent_fd] if accepting else [])]
            ready, _, _ = select.select(watched, [], [], None if accepting else 1.0)
            if self.wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(self.wake_r, 512)
            self._reap()
            if accepting and self.parent_fd in ready and not os.read(self.parent_fd, 1):
                accepting = False
                self.listener.close()
            elif accepting and self.listener in ready:
                conn, _ = self.listener.accept()
                try:
                    self._start(conn)
                except Exception as e:  # this client starts the command itself (no pid came)
                    print(f"preload: a request failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                    conn.close()

    def _start(self, conn: socket.socket) -> None:
        conn.settimeout(10)  # a client that stalls holds up no other
        request, fds = _recv(conn, maxfds=4)
        try:
            if request is None or len(fds) != 4:
                raise ValueError("an incomplete request")
            sys.stdout.flush(), sys.stderr.flush()
            pid = os.fork()
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        if pid == 0:  # the child: never returns
            self.listener.close()
            for other in (conn, *self.waiting.values()):
                other.close()
            for fd in (self.wake_r, self.wake_w, self.parent_fd):
                os.close(fd)
            _become(request, fds)
        for fd in fds:
            os.close(fd)
        self.waiting[pid] = conn
        with contextlib.suppress(OSError):  # the client is gone: its child follows it (its pipe)
            _send(conn, {"pid": pid})

    def _reap(self) -> None:
        while self.waiting:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.waiting.pop(pid, None)
            if conn is None:
                continue
            end = (
                {"signal": os.WTERMSIG(status)}
                if os.WIFSIGNALED(status)
                else {"code": os.waitstatus_to_exitcode(status)}
            )
            with contextlib.suppress(OSError):
                _send(conn, end)
            conn.close()


def _become(request: dict, fds: list[int]) -> None:
    """In a forked child: take the client's streams, folder, environment, import path and signal
    dispositions (what it ignores stays ignored: ``nohup``'s SIGHUP, the driver's SIGINT), then run
    its command line as ``python`` would (``-u`` and ``-m MODULE ARGS`` only), and end as a Python
    process ends (its threads joined, its exit functions run). Never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        ignored = set(request["ignored"])
        for signum in (*FORWARDED, signal.SIGCHLD, signal.SIGTSTP):
            default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
            signal.signal(signum, signal.SIG_IGN if int(signum) in ignored else default)
        for target, fd in zip((0, 1, 2), fds[:3], strict=True):
            os.dup2(fd, target)
            os.close(fd)
        _die_with_client(fds[3])
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[:] = request["path"]
        code = _run_module(request["argv"])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        _finalize()
        os._exit(code)


def _finalize() -> None:
    """What a Python process does at its end before it exits: wait for its non-daemon threads
    (a checkpoint marker, a metrics part being written), run its exit functions, flush its streams
    (as ``multiprocessing`` ends a forked child, and then what it leaves out)."""
    import atexit

    for step in (threading._shutdown, atexit._run_exitfuncs, sys.stdout.flush, sys.stderr.flush):
        with contextlib.suppress(BaseException):
            step()


def _run_module(argv: list[str]) -> int:
    """``python [-u] -m MODULE ARGS...`` in this process; returns 0 when the module returns."""
    import runpy

    args = [a for a in argv if a != "-u"]
    if len(args) < 2 or args[0] != "-m":
        raise SystemExit(f"preloaded interpreter: only `-m MODULE ...` command lines, got {argv}")
    sys.argv = [args[1], *args[2:]]
    runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    return 0


def _die_with_client(fd: int) -> None:
    """A daemon thread that kills this process when the client's pipe ``fd`` closes."""

    def watch() -> None:
        while os.read(fd, 1):
            pass
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="client-watch", daemon=True).start()


def main(argv: list[str]) -> None:
    """``python -m harness.cluster.preload serve SOCKET PARENT_FD [MODULE ...]``: the server (its
    modules :data:`PRELOAD` unless named); anything else: the client, with the command line it runs (``-u -m submitit.core._submit FOLDER``)."""
    if argv[:1] == ["serve"]:
        server = Server(argv[1], int(argv[2]), tuple(argv[3:]) or PRELOAD)
        if server.preload():
            server.serve()
        return
    client(argv)


#: Set to 1: local jobs start Python and import everything themselves, as submitit starts them.
NO_PRELOAD_ENV = "GRPO_HARNESS_NO_PRELOAD"


def wanted(in_process: bool, runs: int, setup: tuple | list = (), devices: Iterable[str] = ()) -> bool:
    """Whether a local ``run`` of ``runs`` runs starts a server: not for the debug executor (its
    runs train in the driver), not for a single run (nothing to share the imports with), not where
    :data:`NO_PRELOAD_ENV` is set, not where the executor has ``setup`` lines (they may change what
    an import reads), and not where a run asks for CUDA by name (``harness.device: cuda``; a forked
    child cannot use CUDA its parent started, and the server refuses to serve if an import started
    it anyway)."""
    disabled = os.environ.get(NO_PRELOAD_ENV, "") not in ("", "0")
    return not (in_process or runs < 2 or setup or disabled or "cuda" in set(devices))


def usable(in_process: bool, setup: tuple | list = (), devices: Iterable[str] = ()) -> bool:
    """Whether a local ``run``'s runs may be forked from a preloaded interpreter at all: as
    :func:`wanted`, whatever the number of runs (one that is already serving costs nothing more)."""
    return wanted(in_process, 2, setup, devices)


def serving_already() -> str | None:
    """The socket of a server that serves this process's jobs already: :data:`SOCKET_ENV` naming a
    socket that exists (this driver was itself started through a preloaded interpreter, as a test
    session starts its command lines). None otherwise. A stale socket is harmless: its clients
    start Python themselves."""
    path = os.environ.get(SOCKET_ENV)
    try:
        return path if path and stat.S_ISSOCK(os.stat(path).st_mode) else None
    except OSError:
        return None


@contextlib.contextmanager
def serving(enabled: bool = True, modules: tuple[str, ...] = (), start: bool = True) -> Iterator[str | None]:
    """A server for the block, its socket in :data:`SOCKET_ENV` (which the jobs launched inside the
    block inherit); yields the command submitit's executor should start for ``python``, or None
    when not ``enabled``. Where a server serves already (:func:`serving_already`) the block uses it;
    otherwise, where ``start``, it starts one, which imports ``modules`` (default :data:`PRELOAD`)
    before it serves and ends with the block, or with this process; else it yields None."""
    if not enabled:
        yield None
        return
    if serving_already():
        yield f"{shlex.quote(sys.executable)} -m harness.cluster.preload"
        return
    if not start:
        yield None
        return
    folder = tempfile.mkdtemp(prefix="grpo-harness-preload-")
    path = str(Path(folder) / "socket")
    parent_r, parent_w = os.pipe()
    with open(Path(folder) / "server.log", "w") as log:  # what libraries say while they import
        proc = subprocess.Popen(
            [sys.executable, "-u", "-m", "harness.cluster.preload", "serve", path, str(parent_r), *modules],
            pass_fds=(parent_r,),
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,  # no terminal's signals: the driver stops the runs (stopping.py)
        )
    os.close(parent_r)
    if not _listening(path, proc):  # it could not start: the runs start Python themselves
        print(
            f"note: the preloaded interpreter did not start ({_tail(Path(folder) / 'server.log')}); "
            "each run starts its own Python",
            file=sys.stderr,
        )
        os.close(parent_w)
        shutil.rmtree(folder, ignore_errors=True)
        yield None
        return
    before = os.environ.get(SOCKET_ENV)
    os.environ[SOCKET_ENV] = path
    try:
        yield f"{shlex.quote(sys.executable)} -m harness.cluster.preload"
    finally:
        if before is None:
            os.environ.pop(SOCKET_ENV, None)
        else:
            os.environ[SOCKET_ENV] = before
        os.close(parent_w)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(folder, ignore_errors=True)


def _listening(path: str, proc: subprocess.Popen, wait_s: float = 20.0) -> bool:
    """Whether the server at ``path`` has bound its socket (it does so before it imports anything)
    within ``wait_s`` seconds and is alive."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        if Path(path).exists():
            return True
        time.sleep(0.02)
    return False


def _tail(log: Path, chars: int = 300) -> str:
    try:
        text = log.read_text().strip()
    except OSError:
        return "no log"
    return text[-chars:] or "no word"


if __name__ == "__main__":
    main(sys.argv[1:])
