"""Run untrusted Python (a model's HumanEval / MBPP completion and its tests) in a contained subprocess.

Containment, from the outside in:
- a new PID and network namespace (`unshare --pid --net --fork --kill-child`): no network at all, and when the
  program's process tree ends or is killed, the kernel kills everything left in the namespace (fork bombs, daemons,
  `setsid` escapees);
- when we run as root, the program runs as `nobody` (`setpriv`) in a fresh working directory inside a parent only
  root may list, so it cannot write into the repo, the home directory or next to its own directory (it can still
  write into world-writable directories such as /tmp, within the file-size limit);
- resource limits: address space (`memory_mb`), CPU seconds, processes of the user, file size, no core dumps;
- a wall-clock timeout, after which the whole process group is killed; the directory is removed afterwards.
Without root or `unshare` only the limits, the timeout, the process group and the directory apply, and the
result says so (`isolated` False).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache

NOBODY = 65534


@dataclass(frozen=True)
class SandboxResult:
    status: str  # "passed" (exit 0), "failed" (non-zero exit), "timeout"
    returncode: int | None
    output: str  # the tail of stdout + stderr
    isolated: bool  # ran in the namespaces as nobody

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@cache
def _namespaces_work() -> bool:
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("setpriv")):
        return False
    probe = subprocess.run(["unshare", "--pid", "--net", "--fork", "--kill-child", "true"], capture_output=True,
                           timeout=10)
    return probe.returncode == 0


def _limits(memory_mb: int, cpu_s: int, max_procs: int):
    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
        resource.setrlimit(resource.RLIMIT_NPROC, (max_procs, max_procs))
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20, 16 << 20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def run_python(code: str, timeout_s: float = 10.0, memory_mb: int = 1024, max_procs: int = 32) -> SandboxResult:
    """Run `code` as a Python program in the sandbox; "passed" means it exited 0 within `timeout_s`."""
    parent = tempfile.mkdtemp(prefix="polestar-sandbox-")
    work = os.path.join(parent, "work")
    os.mkdir(work)
    with open(os.path.join(work, "program.py"), "w") as f:
        f.write(code)
    isolated = _namespaces_work()
    cmd = [sys.executable, "-I", "program.py"]
    if isolated:
        os.chmod(parent, 0o711)  # nobody may pass through to its directory, not list or write the parent
        os.chown(work, NOBODY, NOBODY)
        os.chown(os.path.join(work, "program.py"), NOBODY, NOBODY)
        cmd = ["unshare", "--pid", "--net", "--fork", "--kill-child",
               "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--", *cmd]
    env = {"PATH": "/usr/bin:/bin", "HOME": work, "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=_limits(memory_mb, int(timeout_s) + 1, max_procs))
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        status = "passed" if proc.returncode == 0 else "failed"
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        out, _ = proc.communicate()
        status = "timeout"
    finally:
        _kill_group(proc.pid)
        shutil.rmtree(parent, ignore_errors=True)
    text = out.decode("utf-8", "replace")[-2000:]
    return SandboxResult(status=status, returncode=proc.returncode, output=text, isolated=isolated)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def check_program(prompt: str, completion: str, test: str, entry_point: str, **limits) -> SandboxResult:
    """A HumanEval-style check: the prompt + the completion, then the task's tests and `check(entry_point)`."""
    return run_python(f"{prompt}{completion}\n\n{test}\n\ncheck({entry_point})\n", **limits)
