"""One place sets the CPU threads of torch, numba and BLAS (cbm.runtime)."""

from __future__ import annotations

import os

import numba
import pytest
import torch
from jsonargparse import ArgumentParser
from threadpoolctl import threadpool_info

from cbm.runtime import add_threads_argument, available_cores, set_threads, thread_settings


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    set_threads(before)


def test_set_threads_sets_torch_numba_blas_and_the_environment(restore_threads):
    record = set_threads(1)
    assert torch.get_num_threads() == 1 and numba.get_num_threads() == 1
    assert all(pool["num_threads"] == 1 for pool in threadpool_info())
    assert os.environ["OMP_NUM_THREADS"] == "1"
    assert record["requested"] == 1 and record["torch"] == 1 and record["numba"] == 1
    assert record["available_cores"] == len(os.sched_getaffinity(0)) == available_cores()
    assert all(pool["threads"] == 1 for pool in record["blas_openmp"])


def test_default_is_the_cores_this_process_may_use(restore_threads):
    record = set_threads(None)
    assert record["requested"] is None and record["torch"] == available_cores()
    assert record["numba"] == min(available_cores(), numba.config.NUMBA_NUM_THREADS)
    assert thread_settings()["torch"] == available_cores()


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "2"])
def test_bad_thread_counts_are_refused(bad):
    with pytest.raises(ValueError, match="threads must be a positive integer"):
        set_threads(bad)


def test_threads_option_takes_positive_integers_only():
    parser = ArgumentParser(exit_on_error=False)
    add_threads_argument(parser)
    assert parser.parse_args([]).threads is None and parser.parse_args(["--threads", "3"]).threads == 3
    with pytest.raises(Exception, match="threads"):
        parser.parse_args(["--threads", "0"])


@pytest.mark.parametrize("script", ["train-detector", "fit-head", "evaluate-openworld",
                                    "evaluate-interventions", "predict"])
def test_every_console_script_takes_threads(script):
    # `make demo DEMO_ARGS=--threads 1` passes it to every step: a parser without it stopped the demo
    from cbm.detector.cli import detector_parser
    from cbm.heads.fit import fit_head_parser
    from cbm.interventions.cli import interventions_parser
    from cbm.openworld.protocol import openworld_parser
    from cbm.predict.cli import predict_parser

    parser = {"train-detector": detector_parser, "fit-head": fit_head_parser,
              "evaluate-openworld": openworld_parser, "evaluate-interventions": interventions_parser,
              "predict": predict_parser}[script]()
    assert "--threads" in parser.format_help()
