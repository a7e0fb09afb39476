"""Holds NumPy to the table of .npy headers in tests/fixtures/npy_headers.txt, which tests/test_npy_headers.c holds
the suite's reader to: NumPy reads every header marked both or numpy, as the table's dtype and shape, and refuses
every header marked neither. Together the two tests say that the suite reads a header only where NumPy reads the same
array. Usage: check_npy_headers.py TABLE WORKDIR. Exit 77 (skipped) when NumPy is not installed."""
import pathlib
import struct
import sys

try:
    import numpy as np
except ImportError:
    print("NumPy is not installed: skipped")
    sys.exit(77)

table, work = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
work.mkdir(parents=True, exist_ok=True)
failures = []
entries = 0
for number, line in enumerate(table.read_text().splitlines(), 1):
    if not line or line.startswith("#"):
        continue
    entries += 1
    who, version, dtype, shape_text, text = line.split("|", 4)
    header = text.replace("\\n", "\n").replace("\\t", "\t").encode("latin1")
    major, minor = (int(x) for x in version.split("."))
    shape = tuple(int(x) for x in shape_text.split(",")) if shape_text else ()
    count = int(np.prod(shape)) if who != "neither" else 6
    payload = np.arange(count, dtype=np.float32 if dtype != "f8" else np.float64).tobytes()
    length = struct.pack("<H" if major == 1 else "<I", len(header))
    path = work / f"line{number}.npy"
    path.write_bytes(b"\x93NUMPY" + bytes([major, minor]) + length + header + payload)
    try:
        array = np.load(path, allow_pickle=False)
    except Exception as error:  # NumPy refuses it
        if who != "neither":
            failures.append(f"line {number}: NumPy refuses a header the table says it reads ({error}): {text}")
        continue
    if who == "neither":
        failures.append(f"line {number}: NumPy reads a header the table says it refuses: {text}")
    elif array.shape != shape or array.dtype != np.dtype("<" + dtype):
        failures.append(f"line {number}: NumPy reads {array.dtype} {array.shape}, the table says {dtype} {shape}")

for failure in failures:
    print(failure)
print(f"NumPy {np.__version__}: {entries - len(failures)} of {entries} headers of the table as expected")
sys.exit(1 if failures else 0)
