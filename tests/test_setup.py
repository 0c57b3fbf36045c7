"""scripts/find_python.sh: make setup's choice of a Python TensorFlow 2.15 supports, with stand-in interpreters."""
import os
import subprocess
import sys

import pytest

FIND = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "find_python.sh")


@pytest.fixture
def stand_ins(tmp_path):
    """A directory for PATH where `python3` is a Python 3.12 (every program it runs fails, as the check does)."""
    (tmp_path / "python3").write_text('#!/bin/sh\n[ "$1" = --version ] && { echo "Python 3.12.3"; exit 0; }\nexit 1\n')
    (tmp_path / "python3").chmod(0o755)
    return tmp_path


def find(path, **env):
    return subprocess.run(["/bin/bash", FIND], capture_output=True, text=True, env={"PATH": str(path), **env})


def test_a_supported_python_beside_an_unsupported_python3_is_chosen(stand_ins):
    (stand_ins / "python3.11").symlink_to(sys.executable)
    result = find(stand_ins)
    assert (result.returncode, result.stdout.strip()) == (0, "python3.11"), result.stderr


def test_without_a_supported_python_one_line_says_how_to_get_one(stand_ins, assert_usage_error):
    assert_usage_error(find(stand_ins), "Python 3.12.3", "3.9-3.11", "make docker-verify")


def test_an_unsupported_python_given_is_refused(stand_ins, assert_usage_error):
    (stand_ins / "python3.11").symlink_to(sys.executable)
    assert_usage_error(find(stand_ins, PYTHON="python3"), "PYTHON=python3", "3.12.3")
    assert find(stand_ins, PYTHON="python3.11").stdout.strip() == "python3.11"


def test_make_setup_makes_the_venv_from_the_python_given(stand_ins):
    """PYTHON=python3.12 make setup reaches scripts/find_python.sh (the Makefile's own PYTHON is the venv's)."""
    repo = os.path.dirname(os.path.dirname(FIND))
    result = subprocess.run(["make", "-s", "-B", "-C", repo, "setup"], capture_output=True, text=True,
                            env={**os.environ, "PATH": f"{stand_ins}:{os.environ['PATH']}", "PYTHON": "python3"})
    assert result.returncode == 2 and "setup: PYTHON=python3 is Python 3.12.3" in result.stderr, result.stderr
