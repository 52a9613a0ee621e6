"""cbm.jobs: the one-line errors and the signal handling every console script shares."""

from __future__ import annotations

import os
import signal

import pytest
import yaml

from cbm.jobs import Interrupted, console_main, one_line, phase, signals_interrupt


@pytest.mark.parametrize("err, line", [
    (ValueError("bad value"), "x: error: bad value"),
    (FileNotFoundError(2, "No such file or directory", "a.txt"),
     "x: error: [Errno 2] No such file or directory: 'a.txt'"),
    (OSError("Caught UnreadableImageError in DataLoader worker process 0.\nOriginal Traceback (most recent "
             "call last):\n  File \"w.py\", line 1, in f\ncbm.data.common.UnreadableImageError: cannot read "
             "image x.jpg: broken data stream"),
     "x: error: cbm.data.common.UnreadableImageError: cannot read image x.jpg: broken data stream"),
    (yaml.YAMLError("while parsing\n  in <unicode string>"), "x: error: while parsing in <unicode string>"),
])
def test_expected_errors_become_one_line(err, line):
    def job():
        raise err

    with pytest.raises(SystemExit) as info:
        console_main("x", job)
    assert info.value.code == line and one_line(err) == line.removeprefix("x: error: ")


def test_other_errors_keep_their_traceback():
    with pytest.raises(KeyError):
        console_main("x", lambda: {}["missing"])


def test_a_signal_names_the_innermost_phase_and_exits_128_plus_its_number(capsys):
    def job():
        with phase("outer", "kept A"), phase("fitting", "kept B"):
            os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as info:
        console_main("x", job)
    assert info.value.code == 128 + signal.SIGTERM
    assert capsys.readouterr().err == "x: error: interrupted by SIGTERM while fitting; kept B\n"
    assert signal.getsignal(signal.SIGTERM) is before  # the handlers are put back


def test_a_forked_worker_keeps_the_default_signal_behaviour(child):
    with signals_interrupt():
        def worker():
            try:
                os.kill(os.getpid(), signal.SIGINT)
            except KeyboardInterrupt:  # what DataLoader workers catch
                os._exit(7)
            except Interrupted:
                os._exit(8)

        status = child.run(worker)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 7
