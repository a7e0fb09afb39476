"""Checks that NumPy loads every .npy file a run saved, with the dtype and shapes the suite promises.
Exit 77 (skipped) when NumPy is not installed."""
import pathlib
import sys

try:
    import numpy as np
except ImportError:
    print("NumPy is not installed: skipped")
    sys.exit(77)

folder = pathlib.Path(sys.argv[1])
q = np.load(folder / "q.npy")
k = np.load(folder / "k.npy")
o = np.load(folder / "o.npy")
lse = np.load(folder / "lse.npy")
assert q.dtype == np.float32 and q.ndim == 4, q.dtype
assert o.shape == q.shape and k.shape[:2] == q.shape[:2], (o.shape, q.shape, k.shape)
assert lse.shape == q.shape[:3], lse.shape
assert np.isfinite(o).all() and np.isfinite(lse).all()
# The saved O must be attention of the saved inputs (checked here in float64 with NumPy, independently of C).
v = np.load(folder / "v.npy").astype(np.float64)
scale = 1.0 / np.sqrt(q.shape[-1])
s = scale * np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64))
causal = "--causal" in (folder / "command.txt").read_text()
if causal:
    s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
m = s.max(axis=-1, keepdims=True)
p = np.exp(s - m)
want = np.einsum("bhqk,bhkd->bhqd", p / p.sum(axis=-1, keepdims=True), v)
err = np.abs(o - want).max() / np.abs(want).max()
assert err < 2e-5, err
print(f"NumPy loaded {len(list(folder.glob('*.npy')))} files; O matches NumPy's attention (rel err {err:.1e})")
