"""Protobuf wire format by hand (no protobuf library needed), and a builder
of pprof profile.proto messages, for the fake upstream APIs."""
import gzip


def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(num, v):
    return varint(num << 3) + varint(v) if v else b""


def field_bytes(num, b):
    if isinstance(b, str):
        b = b.encode()
    return varint((num << 3) | 2) + varint(len(b)) + b


def decode(buf):
    """{field number: [values]}: ints for varints, bytes for length-delimited."""
    out, i = {}, 0
    while i < len(buf):
        key, i = _read_varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _read_varint(buf, i)
        elif wt == 2:
            n, i = _read_varint(buf, i)
            v, i = bytes(buf[i:i + n]), i + n
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wt}")
        out.setdefault(num, []).append(v)
    return out


def _read_varint(buf, i):
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7


def signed(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def profile(sample_types, samples, period_type=None, period=0, time_nanos=0, duration_nanos=0):
    """profile.proto bytes. sample_types: [(type, unit)]; samples:
    [([leaf function, ..., root function], [values])]."""
    strings = [""]

    def s(x):
        if x not in strings:
            strings.append(x)
        return strings.index(x)

    funcs, out = {}, bytearray()
    if period_type:
        s(period_type[0]), s(period_type[1])
    for t, u in sample_types:
        out += field_bytes(1, field_varint(1, s(t)) + field_varint(2, s(u)))
    for stack, values in samples:
        ids = []
        for name in stack:
            if name not in funcs:
                funcs[name] = len(funcs) + 1
            ids.append(funcs[name])
        body = field_bytes(1, b"".join(varint(i) for i in ids))
        body += field_bytes(2, b"".join(varint(v) for v in values))
        out += field_bytes(2, body)
    out += field_bytes(3, field_varint(1, 1) + field_varint(5, s("fakeapp")) +
                       field_varint(7, 1))  # mapping 1, has_functions
    for name, fid in funcs.items():  # location id == function id
        line = field_varint(1, fid) + field_varint(2, fid)
        out += field_bytes(4, field_varint(1, fid) + field_varint(2, 1) + field_bytes(4, line))
    for name, fid in funcs.items():  # start_line kept, as Pyroscope and Parca store it
        out += field_bytes(5, field_varint(1, fid) + field_varint(2, s(name)) +
                           field_varint(4, s("main.go")) + field_varint(5, fid))
    for x in list(strings):
        out += field_bytes(6, x)
    out += field_varint(9, time_nanos) + field_varint(10, duration_nanos)
    if period_type:
        out += field_bytes(11, field_varint(1, s(period_type[0])) +
                           field_varint(2, s(period_type[1])))
    out += field_varint(12, period)
    return bytes(out)


def gz(b):
    return gzip.compress(b)
