"""The preloaded interpreter of local jobs (harness.cluster.preload): a command run through its
client behaves as if Python ran it there (exit code, streams, folder, environment, signals), dies
with its client, and runs by itself where no server answers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from harness.cluster import preload

MODULE = textwrap.dedent(
    """
    import os, signal, sys, time
    if sys.argv[1] == "wait":
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))
        signal.signal(signal.SIGUSR2, lambda *a: print("USR2", flush=True))
    print("child", os.getpid(), os.getcwd(), os.environ.get("PRELOAD_TEST"), sys.argv[1:], flush=True)
    print("on stderr", file=sys.stderr, flush=True)
    if sys.argv[1] == "wait":
        time.sleep(60)
    if sys.argv[1] == "raise":
        raise ValueError("boom")
    if sys.argv[1] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if sys.argv[1] == "hup":
        print("SIGHUP", "ignored" if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN else "not ignored", flush=True)
    if sys.argv[1] == "thread":
        import threading
        def late():
            time.sleep(0.5)
            print("thread done", flush=True)
        threading.Thread(target=late).start()
    sys.exit(int(sys.argv[1]) if sys.argv[1].isdigit() else 0)
    """
)


@pytest.fixture()
def module_dir(tmp_path):
    (tmp_path / "preload_probe.py").write_text(MODULE)
    return tmp_path


def run(python: str, module_dir, *args: str, **kw):
    env = dict(
        os.environ,
        PRELOAD_TEST="set",
        PYTHONPATH=f"{module_dir}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    )
    cmd = [*python.split(), "-u", "-m", "preload_probe", *args]
    return subprocess.Popen(
        cmd, env=env, cwd=module_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw
    )


def test_a_command_runs_in_a_forked_child_as_it_would_run_alone(module_dir):
    with preload.serving(True, modules=("json",)) as python:
        assert python and python.endswith("-m harness.cluster.preload")
        p = run(python, module_dir, "3")
        out, err = p.communicate(timeout=60)
    assert p.returncode == 3
    word, pid, cwd, env, argv = out.split(" ", 4)
    assert word == "child" and int(pid) != p.pid, (
        "the command ran in a child of the server, not in the client"
    )
    assert cwd == str(module_dir) and env == "set" and argv.strip() == "['3']"
    assert err == "on stderr\n"


def test_an_exception_is_printed_and_exits_1(module_dir):
    with preload.serving(True, modules=("json",)) as python:
        p = run(python, module_dir, "raise")
        _, err = p.communicate(timeout=60)
    assert p.returncode == 1 and "ValueError: boom" in err


def test_signals_reach_the_child_and_it_dies_with_its_client(module_dir):
    with preload.serving(True, modules=("json",)) as python:
        p = run(python, module_dir, "wait")
        child = int(p.stdout.readline().split()[1])
        p.send_signal(signal.SIGUSR2)
        assert p.stdout.readline() == "USR2\n"
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 7
        q = run(python, module_dir, "wait")
        child = int(q.stdout.readline().split()[1])
        q.kill()
        q.wait(timeout=30)
        for _ in range(100):
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"child {child} outlived its killed client")


def test_without_a_server_the_client_runs_the_command_itself(module_dir, monkeypatch):
    monkeypatch.setenv(preload.SOCKET_ENV, str(module_dir / "no-such-folder" / "socket"))
    p = run(f"{sys.executable} -m harness.cluster.preload", module_dir, "5")
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 5 and int(out.split()[1]) == p.pid, "exec'd in place"


def test_the_server_ends_with_the_block(module_dir):
    with preload.serving(True, modules=("json",)) as python:
        path = os.environ[preload.SOCKET_ENV]
        p = run(python, module_dir, "0")
        p.communicate(timeout=60)
    assert preload.SOCKET_ENV not in os.environ and not os.path.exists(path)


def test_when_a_server_is_wanted():
    assert preload.wanted(False, 2) and preload.wanted(False, 2, devices=["cpu", "auto"])
    assert not preload.wanted(True, 2), "the debug executor trains in the driver"
    assert not preload.wanted(False, 1)
    assert not preload.wanted(False, 2, ["module load cuda"]), "setup lines may change what imports read"
    assert not preload.wanted(False, 2, devices=["cpu", "cuda"]), (
        "a forked child cannot use its parent's CUDA"
    )


def test_a_driver_started_through_a_server_has_its_runs_forked_by_that_one(module_dir, monkeypatch):
    """A ``run`` whose own process came from a preloaded interpreter (as the test session starts its
    command lines) forks its runs there too, a single run included; it starts none of its own."""
    with preload.serving(True, modules=("json",)) as python:
        path = os.environ[preload.SOCKET_ENV]
        with preload.serving(True, start=False) as inner:
            assert inner == python and os.environ[preload.SOCKET_ENV] == path
            p = run(inner, module_dir, "0")
            out, _ = p.communicate(timeout=60)
            assert p.returncode == 0 and int(out.split()[1]) != p.pid
        assert os.environ[preload.SOCKET_ENV] == path and os.path.exists(path)  # still the outer one's
        with preload.serving(False) as off:
            assert off is None, "the debug executor, setup lines or CUDA: never forked"
    with preload.serving(True, start=False) as none:
        assert none is None  # no server, and none wanted for one run
    monkeypatch.setenv(preload.SOCKET_ENV, path)  # the socket of a server that has ended
    assert preload.serving_already() is None
    with preload.serving(True, start=False) as stale:
        assert stale is None


def test_a_child_killed_by_sigkill_ends_its_client_the_same_way(module_dir):
    with preload.serving(True, modules=("json",)) as python:
        p = run(python, module_dir, "kill")
        _, err = p.communicate(timeout=60)
    assert p.returncode == -signal.SIGKILL and "Traceback" not in err


def test_a_signal_the_client_ignores_stays_ignored_in_the_child(module_dir):
    """``nohup grpo-harness run``: the runs keep ignoring SIGHUP, as they did when submitit
    started them directly."""
    with preload.serving(True, modules=("json",)) as python:
        p = run(python, module_dir, "hup", preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
        out, _ = p.communicate(timeout=60)
        q = run(python, module_dir, "hup", preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
        out2, _ = q.communicate(timeout=60)
    assert "SIGHUP ignored" in out and "SIGHUP not ignored" in out2


def test_the_child_ends_as_python_does_waiting_for_its_threads(module_dir):
    with preload.serving(True, modules=("json",)) as python:
        p = run(python, module_dir, "thread")
        out, _ = p.communicate(timeout=60)
    assert p.returncode == 0 and out.endswith("thread done\n"), out


def test_a_server_that_cannot_start_leaves_each_run_to_start_python(module_dir, monkeypatch, capsys):
    # a server that dies at once (a socket path it cannot bind) is reported and not used
    monkeypatch.setattr(preload.tempfile, "mkdtemp", lambda prefix: str(module_dir / ("x" * 120)))
    (module_dir / ("x" * 120)).mkdir()
    with preload.serving(True, modules=("json",)) as python:
        assert python is None and preload.SOCKET_ENV not in os.environ
    assert "the preloaded interpreter did not start" in capsys.readouterr().err


def test_the_gpus_a_local_job_sees():
    from harness.cluster.executors import local_gpus
    from harness.settings.schema import ExecutorSettings

    none, two = ExecutorSettings(), ExecutorSettings(gpus_per_node=1)
    assert local_gpus(none, {"CUDA_VISIBLE_DEVICES": "2,3"}) == {"gpus_per_node": 2, "visible_gpus": (2, 3)}
    assert local_gpus(two, {"CUDA_VISIBLE_DEVICES": "2,3"}) == {"gpus_per_node": 1, "visible_gpus": (2, 3)}
    assert local_gpus(none, {"CUDA_VISIBLE_DEVICES": ""}) == {}
    assert local_gpus(none, {"CUDA_VISIBLE_DEVICES": "GPU-1a2b"}) == {"gpus_per_node": 1}
