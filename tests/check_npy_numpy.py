"""Checks the .npy files a run saved with NumPy alone: NumPy loads them with the dtype and shapes the suite promises,
and the saved outputs are attention of the saved inputs, computed here in float64 independently of the C code:
O and LSE always, and dQ, dK, dV when the run saved them (phase 4). Whether the run was causal is read from the
command line the run saved (command.txt), so a run that saved another problem than it was asked for fails.
Exit 77 (skipped) when NumPy is not installed."""
import pathlib
import sys

try:
    import numpy as np
except ImportError:
    print("NumPy is not installed: skipped")
    sys.exit(77)

folder = pathlib.Path(sys.argv[1])
q, k, v, o = (np.load(folder / f"{name}.npy") for name in ("q", "k", "v", "o"))
assert q.dtype == np.float32 and q.ndim == 4, q.dtype
assert o.shape == q.shape and k.shape[:2] == q.shape[:2] and v.shape == k.shape, (o.shape, q.shape, k.shape)
command = (folder / "command.txt").read_text().split()
causal = "--causal" in command
scale = 1.0 / np.sqrt(q.shape[-1])
if "--scale" in command:
    scale = float(command[command.index("--scale") + 1])

# Standard attention in float64 (causal: row i sees keys j <= i, top-left aligned).
q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
s = scale * np.einsum("bhqd,bhkd->bhqk", q64, k64)
if causal:
    s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
m = s.max(axis=-1, keepdims=True)
e = np.exp(s - m)
p = e / e.sum(axis=-1, keepdims=True)
want = {"o": np.einsum("bhqk,bhkd->bhqd", p, v64), "lse": (m + np.log(e.sum(axis=-1, keepdims=True)))[..., 0]}
if (folder / "do.npy").exists():
    do = np.load(folder / "do.npy").astype(np.float64)
    dp = np.einsum("bhqd,bhkd->bhqk", do, v64)
    ds = p * (dp - (do * want["o"]).sum(axis=-1, keepdims=True))
    want["dv"] = np.einsum("bhqk,bhqd->bhkd", p, do)
    want["dq"] = scale * np.einsum("bhqk,bhkd->bhqd", ds, k64)
    want["dk"] = scale * np.einsum("bhqk,bhqd->bhkd", ds, q64)

tolerance = {"o": 2e-5, "lse": 2e-5, "dq": 1e-4, "dk": 1e-4, "dv": 1e-4}
report = []
for name, ref in want.items():
    path = folder / f"{name}.npy"
    if not path.exists():
        assert name == "lse", f"{name}.npy was not saved"   # phase 2 has no LSE
        continue
    got = np.load(path)
    assert got.dtype == np.float32 and got.shape == ref.shape, (name, got.dtype, got.shape, ref.shape)
    assert np.isfinite(got).all(), f"{name}.npy holds NaN or Inf"
    err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)
    assert err < tolerance[name], f"{name}.npy is not attention of the saved inputs (causal={causal}): rel err {err:.2e}"
    report.append(f"{name} {err:.1e}")
print(f"NumPy loaded {len(list(folder.glob('*.npy')))} files; causal={causal}; rel err against NumPy's attention: "
      + ", ".join(report))
