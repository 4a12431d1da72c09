"""The numerics job's written-out SGD must update exactly as torch.optim.SGD with momentum does
(it replaces torch.optim only to avoid importing torch._dynamo in every training process)."""

import subprocess
import sys

import pytest
import torch

from gputopo.numerics.job import NumericsOptions, build_model, make_data, make_optimizer


def _train(opt_factory, steps=7):
    opts = NumericsOptions(steps=steps)
    torch.manual_seed(3)
    model = build_model(opts)
    x, y = make_data(opts)
    opt = opt_factory(model.parameters(), opts)
    for s in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x[s]), y[s])
        loss.backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def test_momentum_sgd_matches_torch_sgd_bit_for_bit():
    ours = _train(make_optimizer)
    theirs = _train(lambda ps, o: torch.optim.SGD(ps, lr=o.lr, momentum=o.momentum))
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert torch.equal(a.view(torch.int32), b.view(torch.int32))
    assert not all(torch.equal(a, b) for a, b in zip(ours, _train(make_optimizer, steps=6)))


@pytest.mark.slow
def test_training_does_not_import_the_compiler_stack():
    code = ("import sys; from gputopo.numerics.job import NumericsOptions, make_data; "
            "from gputopo.numerics import ways; o = NumericsOptions(steps=2); "
            "ways.train_reference(o, make_data(o)); print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
