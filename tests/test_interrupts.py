"""Ctrl-C aimed at the launcher's process group never kills a helper command it is starting."""

import subprocess
import sys
import textwrap

import pytest

from playground.cli.testing import subprocess_env

# In a process group of its own: one process sends SIGINT to the whole group every 0.5 ms (a storm of
# Ctrl-Cs) while the other runs short commands through netns.run, as the launcher builds hosts.
STORM = textwrap.dedent(
    """
    import os, signal, sys, time
    from playground.core.errors import EmulationError
    from playground.hosts import netns

    os.setpgrp()
    signal.signal(signal.SIGINT, lambda *a: None)  # the launcher's handler only remembers it
    group, seconds = os.getpgrp(), float(sys.argv[1])
    killer = os.fork()
    if killer == 0:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            os.killpg(group, signal.SIGINT)
            time.sleep(0.0005)
        os._exit(0)
    runs, failed = 0, []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            netns.run("true")
        except EmulationError as e:
            failed.append(str(e))
        runs += 1
    os.waitpid(killer, 0)
    print(runs, len(failed), failed[:1])
    """
)


@pytest.mark.timeout(60)
def test_a_command_started_during_ctrl_c_is_not_killed_by_it():
    """CI saw `ip` die of the SIGINT meant for the launcher (status -2): a child is in our process
    group until its setsid. Without interrupts.held() about 1 run in 11 died here."""
    done = subprocess.run(
        [sys.executable, "-c", STORM, "1.5"], capture_output=True, text=True, timeout=45, env=subprocess_env()
    )
    assert done.returncode == 0, done.stderr
    runs, failed, first = done.stdout.split(maxsplit=2)
    assert int(runs) > 100 and int(failed) == 0, done.stdout
