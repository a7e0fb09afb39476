#!/usr/bin/env python3
"""make_corpus.py - writes the seed corpus of the .npy fuzzer into tests/fuzz/corpus/ (Python standard library only).

The seed inputs are a few valid files in the three format versions and both float types, and one file of each
malformed kind the reader must refuse. The fuzzer mutates copies of them (tests/fuzz/run.sh), so they only need to
reach every branch of common/fa_npy.c once. Run it again after changing the list; the files are committed.
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC = b"\x93NUMPY"


def header(version, text, align=64):
    """Magic, version, header length and the header text, padded with spaces and ending in a newline as NumPy writes."""
    prefix = 10 if version == 1 else 12
    text = text.encode("latin-1")
    pad = (-(prefix + len(text) + 1)) % align
    text = text + b" " * pad + b"\n"
    size = struct.pack("<H", len(text)) if version == 1 else struct.pack("<I", len(text))
    return MAGIC + bytes([version, 0]) + size + text


def dictionary(descr, shape, fortran="False", quote="'"):
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    q = quote
    return "{%sdescr%s: %s%s%s, %sfortran_order%s: %s, %sshape%s: (%s), }" % (
        q, q, q, descr, q, q, q, fortran, q, q, dims)


def payload(count, itemsize):
    values = [((i * 37) % 11 - 5) / 4.0 for i in range(count)]
    return struct.pack("<%d%s" % (count, "f" if itemsize == 4 else "d"), *values)


def npy(version, descr, shape, fortran="False", quote="'", extra=0):
    count = 1
    for d in shape:
        count *= d
    itemsize = 8 if descr.endswith("8") else 4
    return header(version, dictionary(descr, shape, fortran, quote)) + payload(count, itemsize) + b"\0" * extra


SEEDS = {
    # Valid: every version, both float types, 1 to 4 dimensions, both quote styles, a 0-d array.
    "valid_v1_f4_2x3.npy": npy(1, "<f4", (2, 3)),
    "valid_v1_f8_2x3.npy": npy(1, "<f8", (2, 3)),
    "valid_v2_f4_1x2x3x4.npy": npy(2, "<f4", (1, 2, 3, 4)),
    "valid_v3_f8_5.npy": npy(3, "<f8", (5,)),
    "valid_v1_f4_doublequotes.npy": npy(1, "<f4", (3, 2), quote='"'),
    "valid_v1_f4_scalar.npy": npy(1, "<f4", ()),
    # Malformed: what the reader must refuse, one line each.
    "bad_magic.npy": b"PK\x03\x04" + npy(1, "<f4", (2, 3))[4:],
    "bad_truncated_prefix.npy": MAGIC + b"\x01\x00\x76",
    "bad_truncated_header.npy": npy(1, "<f4", (2, 3))[:40],
    "bad_short_payload.npy": npy(1, "<f4", (2, 3))[:-4],
    "bad_long_payload.npy": npy(1, "<f4", (2, 3), extra=8),
    "bad_dtype_i4.npy": npy(1, "<i4", (2, 3)),
    "bad_dtype_f2.npy": npy(1, "<f2", (2, 3)),
    "bad_big_endian.npy": npy(1, ">f4", (2, 3)),
    "bad_fortran.npy": npy(1, "<f4", (2, 3), fortran="True"),
    "bad_fortran_value.npy": npy(1, "<f4", (2, 3), fortran="Maybe"),
    "bad_rank9.npy": npy(1, "<f4", (1,) * 9),
    "bad_huge_shape.npy": header(1, dictionary("<f4", (99999999999, 99999999999))) + b"\0" * 24,
    "bad_dim_too_large.npy": header(1, dictionary("<f4", (1 << 41, 1))) + b"\0" * 24,
    "bad_negative_dim.npy": header(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }") + b"\0" * 24,
    "bad_shape_text.npy": header(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }") + b"\0" * 24,
    "bad_shape_not_tuple.npy": header(1, "{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }") + b"\0" * 24,
    "bad_no_shape.npy": header(1, "{'descr': '<f4', 'fortran_order': False, }") + b"\0" * 24,
    "bad_no_descr.npy": header(1, "{'fortran_order': False, 'shape': (2, 3), }") + b"\0" * 24,
    "bad_no_fortran.npy": header(1, "{'descr': '<f4', 'shape': (2, 3), }") + b"\0" * 24,
    "bad_nul_in_header.npy": header(1, "{'descr': '<f4',\0'fortran_order': False, 'shape': (2, 3), }") + b"\0" * 24,
    "bad_version4.npy": MAGIC + b"\x04\x00" + npy(1, "<f4", (2, 3))[8:],
    "bad_v2_header_len_huge.npy": MAGIC + b"\x02\x00\xff\xff\xff\xff" + b"{}",
    "bad_v1_header_len_past_end.npy": MAGIC + b"\x01\x00\xff\xff" + b"{'descr': '<f4'",
}


def main():
    out = os.path.join(HERE, "corpus")
    os.makedirs(out, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print("wrote %d seeds into %s" % (len(SEEDS), out))


if __name__ == "__main__":
    main()
