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

    funcs, locs, out = {}, {}, bytearray()
    if period_type:
        s(period_type[0]), s(period_type[1])
    for t, u in sample_types:
        out += field_bytes(1, field_varint(1, s(t)) + field_varint(2, s(u)))
    for stack, values in samples:
        ids = []
        for name in stack:  # a function name, or an int: an address without lines
            if isinstance(name, str) and name not in funcs:
                funcs[name] = len(funcs) + 1
            if name not in locs:
                locs[name] = len(locs) + 1
            ids.append(locs[name])
        body = field_bytes(1, b"".join(varint(i) for i in ids))
        body += field_bytes(2, b"".join(varint(v) for v in values))
        out += field_bytes(2, body)
    out += field_bytes(3, field_varint(1, 1) + field_varint(5, s("fakeapp")) +
                       field_varint(7, 1))  # mapping 1, has_functions
    for name, lid in locs.items():  # a function's line is its id
        if isinstance(name, int):
            out += field_bytes(4, field_varint(1, lid) + field_varint(2, 1) +
                               field_varint(3, name))
            continue
        fid = funcs[name]
        line = field_varint(1, fid) + field_varint(2, fid)
        out += field_bytes(4, field_varint(1, lid) + field_varint(2, 1) + field_bytes(4, line))
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


def _packed(vals):
    """A repeated varint field's values, packed (bytes) or not (ints)."""
    out = []
    for v in vals:
        if isinstance(v, bytes):
            i = 0
            while i < len(v):
                x, i = _read_varint(v, i)
                out.append(x)
        else:
            out.append(v)
    return out


class Profile:
    """A profile.proto (gzip'd or not) read back: sample types, samples as
    (function names leaf first, values), time, duration, comments."""
    def __init__(self, data):
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        f = decode(data)
        self.strings = [s.decode() for s in f.get(6, [])]
        s = self.strings
        self.types = []
        for vt in f.get(1, []):
            d = decode(vt)
            self.types.append(s[d.get(1, [0])[0]])
        funcs = {}
        for fn in f.get(5, []):
            d = decode(fn)
            funcs[d.get(1, [0])[0]] = s[d.get(2, [0])[0]]
        locs = {}
        for loc in f.get(4, []):
            d = decode(loc)
            names = [funcs.get(decode(ln).get(1, [0])[0], "") for ln in d.get(4, [])]
            locs[d.get(1, [0])[0]] = names
        self.samples = []
        for smp in f.get(2, []):
            d = decode(smp)
            stack = [n for lid in _packed(d.get(1, [])) for n in locs.get(lid, ["?"])]
            values = [signed(v) for v in _packed(d.get(2, []))]
            self.samples.append((stack, values))
        self.time_nanos = signed(f.get(9, [0])[0])
        self.duration_nanos = signed(f.get(10, [0])[0])
        self.comments = [s[i] for i in _packed(f.get(13, []))]

    def total(self, type_, function=None):
        """Sum of a sample type over samples whose stack holds a function
        whose name is function or starts with function + '.' (its closures)."""
        i = self.types.index(type_)
        return sum(v[i] for stack, v in self.samples
                   if function is None or any(n == function or n.startswith(function + ".")
                                              for n in stack))
