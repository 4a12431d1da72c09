"""Numerics options: validation (one-line UsageError, exit 2), defaults, DataParallel's split."""

from __future__ import annotations

import pytest

from gputopo.errors import EXIT_USAGE, UsageError
from gputopo.numerics import MODELS, NumericsOptions, split_sizes, validate_options


def test_defaults():
    o = validate_options()
    assert o == NumericsOptions()
    assert (o.steps, o.model, o.batch) == (50, "mlp", 64)
    assert 0 < o.lr <= 1
    assert set(MODELS) == {"mlp", "cnn", "cnn-bn"}


def test_strings_as_the_cli_passes_them():
    o = validate_options(steps="20", lr="0.1", model="CNN-BN", batch="10")
    assert (o.steps, o.lr, o.model, o.batch) == (20, 0.1, "cnn-bn", 10)
    assert o.batchnorm


@pytest.mark.parametrize("kwargs, flag", [
    ({"steps": 0}, "--steps"), ({"steps": -3}, "--steps"), ({"steps": "abc"}, "--steps"),
    ({"steps": 1.5}, "--steps"), ({"steps": "1e9"}, "--steps"), ({"steps": True}, "--steps"),
    ({"lr": 0}, "--lr"), ({"lr": -0.1}, "--lr"), ({"lr": "nan"}, "--lr"), ({"lr": "inf"}, "--lr"),
    ({"lr": "fast"}, "--lr"), ({"lr": 1e6}, "--lr"),
    ({"model": "resnet50"}, "--model"), ({"model": ""}, "--model"),
    ({"batch": 1}, "--batch"), ({"batch": "x"}, "--batch"),
    ({"momentum": 1.0}, "--momentum"),
    ({"inject_nan_at_step": 50}, "inject_nan_at_step"),
])
def test_bad_values_are_one_line_usage_errors(kwargs, flag):
    with pytest.raises(UsageError) as e:
        validate_options(**kwargs)
    msg = str(e.value)
    assert flag in msg
    assert "\n" not in msg
    assert e.value.exit_code == EXIT_USAGE


@pytest.mark.parametrize("batch, sizes", [(10, [5, 5]), (9, [5, 4]), (64, [32, 32]), (3, [2, 1]),
                                          (2, [1, 1])])
def test_split_is_torch_chunk(batch, sizes):
    assert split_sizes(batch, 2) == sizes
    torch = pytest.importorskip("torch")
    assert [c.shape[0] for c in torch.arange(batch).chunk(2)] == sizes


@pytest.mark.slow
def test_import_is_light():
    import subprocess
    import sys

    code = ("import sys, gputopo.numerics; "
            "print(','.join(m for m in ('torch', 'pandas', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
