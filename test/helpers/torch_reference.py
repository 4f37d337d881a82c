"""Reference results from Python's PyTorch for test/ops.test.ts.

Usage: python3 torch_reference.py DIR

DIR holds inputs.safetensors (the inputs of every case, named "<case>/<input>") and
cases.json ({"threads": n, "cases": [{"name", "expr", "inputs": [...]}, ...]}). Each case's
expression is evaluated with its inputs bound to their short names and with torch, F
(torch.nn.functional) and math in scope. The results go to DIR/outputs.safetensors: a tensor
result under "<case>", a tuple or list under "<case>#0", "<case>#1", ... (nested as needed),
a Python number or bool as a 0-d tensor (float64, int64 or bool). A case whose expression
raises is listed, with the error, in the file's metadata under "errors" (a JSON object).

The safetensors package is not needed: the format is an 8-byte little-endian header length,
a JSON header {name: {dtype, shape, data_offsets: [begin, end]}} and the raw bytes.
"""

import json
import math
import struct
import sys
import traceback

import numpy as np
import torch
import torch.nn.functional as F

DTYPES = {
    "F64": (torch.float64, np.float64),
    "F32": (torch.float32, np.float32),
    "F16": (torch.float16, np.int16),  # numpy has no bfloat16: move the bits as int16
    "BF16": (torch.bfloat16, np.int16),
    "I64": (torch.int64, np.int64),
    "I32": (torch.int32, np.int32),
    "I16": (torch.int16, np.int16),
    "I8": (torch.int8, np.int8),
    "U8": (torch.uint8, np.uint8),
    "BOOL": (torch.bool, np.bool_),
}
CODES = {t: code for code, (t, _) in DTYPES.items()}


def load_safetensors(path):
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8 : 8 + n])
    data = memoryview(buf)[8 + n :]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        dtype, np_dtype = DTYPES[e["dtype"]]
        begin, end = e["data_offsets"]
        t = torch.from_numpy(np.frombuffer(data[begin:end], dtype=np_dtype).copy())
        if dtype in (torch.float16, torch.bfloat16):
            t = t.view(dtype)
        out[name] = t.reshape(e["shape"])
    return out


def save_safetensors(path, tensors, metadata):
    header = {"__metadata__": metadata}
    blobs = []
    offset = 0
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        raw = t.view(torch.int16) if t.dtype in (torch.float16, torch.bfloat16) else t
        b = raw.numpy().tobytes()
        header[name] = {"dtype": CODES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def flatten(name, value, out):
    if isinstance(value, torch.Tensor):
        out[name] = value
    elif isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            flatten(f"{name}#{i}", v, out)
    elif isinstance(value, bool):
        out[name] = torch.tensor(value, dtype=torch.bool)
    elif isinstance(value, int):
        out[name] = torch.tensor(value, dtype=torch.int64)
    elif isinstance(value, float):
        out[name] = torch.tensor(value, dtype=torch.float64)
    else:
        raise TypeError(f"cannot store a result of type {type(value).__name__}")


def main():
    d = sys.argv[1]
    with open(f"{d}/cases.json") as f:
        spec = json.load(f)
    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    inputs = load_safetensors(f"{d}/inputs.safetensors")
    outputs, errors = {}, {}
    for case in spec["cases"]:
        name = case["name"]
        scope = {"torch": torch, "F": F, "math": math}
        for k in case["inputs"]:
            scope[k] = inputs[f"{name}/{k}"]
        try:
            result = {}
            flatten(name, eval(case["expr"], scope), result)
            outputs.update(result)
        except Exception:
            errors[name] = traceback.format_exc(limit=2)
    save_safetensors(f"{d}/outputs.safetensors", outputs, {"errors": json.dumps(errors), "torch": torch.__version__})


if __name__ == "__main__":
    main()
