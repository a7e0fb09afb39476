"""test_compile.py - the operators under torch.library.opcheck (schema, fake implementation, autograd registration)
and torch.compile of a small module that calls them: one graph (fullgraph=True), the same outputs and gradients
as eager mode."""
import pytest
import torch

import flash_steps
from conftest import DEVICES, random_inputs


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype, features", [(torch.float32, (True, -1, -1, 0.0)), (torch.float32, (False, 9, 3, 0.0)),
                                             (torch.float32, (False, -1, -1, 7.0)), (torch.bfloat16, (True, -1, -1, 0.0))])
def test_opcheck(device, dtype, features):
    q, k, v, dout = random_inputs(1, 2, 2, 33, 41, 64, dtype, device, seed=51)
    causal, left, right, softcap = features
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    torch.library.opcheck(flash_steps.ops.forward, (q, k, v, causal, 0.125, left, right, softcap, True))
    o, lse, residual = flash_steps.ops.forward(q, k, v, causal, 0.125, left, right, softcap, True)
    torch.library.opcheck(flash_steps.ops.backward, (dout, q.detach(), k.detach(), v.detach(), o.detach(), lse,
                                                     residual, causal, 0.125, left, right, softcap, True))


class Block(torch.nn.Module):
    """A self-attention block: the projections are PyTorch's, the attention the suite's."""
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.out = torch.nn.Linear(width, width)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        y = flash_steps.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(B, T, C))


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_module(device):
    torch.manual_seed(52)
    block = Block(128, 2).to(device)
    x = torch.randn(2, 45, 128, device=device)
    eager = block(x)
    eager.square().sum().backward()
    eager_grads = [p.grad.clone() for p in block.parameters()]
    block.zero_grad()
    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True)
    y = compiled(x)
    y.square().sum().backward()
    torch.testing.assert_close(y, eager, rtol=1e-5, atol=1e-5)
    for p, g in zip(block.parameters(), eager_grads):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-5)
