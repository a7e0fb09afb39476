"""flash_steps: the suite's FlashAttention kernels as PyTorch operators (python/README.md).

    import flash_steps
    o = flash_steps.scaled_dot_product_attention(q, k, v, is_causal=True)   # like torch's, on the suite's kernels
    o, lse = flash_steps.attention(q, k, v, causal=True)                     # and the log-sum-exp

float32 runs phase 3 step 3's forward and phase 4's backward; fp16 and bf16 run phase 5's tensor-core forward
(step 3) and backward (step 4); GQA, a sliding window and softcapping run phase 6's kernels (float32). CPU tensors
go to the CPU twins, CUDA tensors to the CUDA kernels.
"""
from .ops import attention, kernel_name, scaled_dot_product_attention

__all__ = ["attention", "kernel_name", "scaled_dot_product_attention"]
