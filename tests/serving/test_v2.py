"""The Open Inference Protocol (/v2) as its own clients speak it: tritonclient.http (JSON and binary tensors)
against a model gencc does not ship, served over loopback; raw HTTP for the error format and the door's limits
on the v2 routes."""

from __future__ import annotations

import json
import socket
import threading
import time

import numpy as np
import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")
th = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

from gencc.engine import ThreadBackend, Workers  # noqa: E402
from gencc.serving import Limits, Service, create_app  # noqa: E402
from gencc.serving.service import make_dispatcher  # noqa: E402

from .serving_helpers import start_server  # noqa: E402

SHAPE, OUT, NAME = (2, 5), (3,), "tiny-net"
WEIGHTS = np.linspace(-1, 1, 30).reshape(10, 3)


def tiny_model(x):
    """A model gencc never saw: (B, 2, 5) -> (B, 3), a float32 linear map and tanh."""
    x = np.asarray(x, dtype=np.float32).reshape(len(x), -1)
    return np.tanh(x @ WEIGHTS.astype(np.float32)).astype(np.float64)


tiny_model.batched = True


def tiny_service(scheme="gcc"):
    pool = Workers(6, ThreadBackend({"f": tiny_model}, dtype=np.float32))
    return Service(pool, lambda env: make_dispatcher(scheme, env, K=3, max_wait=0.02))


@pytest.fixture(scope="module")
def served():
    svc = tiny_service()
    app = create_app(svc, limits=Limits(read_timeout_s=0.5, max_batch=16), in_shape=SHAPE, out_shape=OUT,
                     name=NAME)
    server, thread, port = start_server(app)
    yield port, svc
    server.should_exit = True
    thread.join(20)


def client(port):
    return th.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=20.0)


def infer(c, x, binary_in, binary_out=None, model=NAME):
    """tritonclient's infer; binary_out None: no outputs named (tritonclient then asks for binary outputs)."""
    i = th.InferInput("input", list(x.shape), "FP32")
    i.set_data_from_numpy(x.astype(np.float32), binary_data=binary_in)
    outs = None if binary_out is None else [th.InferRequestedOutput("output", binary_data=binary_out)]
    return c.infer(model, [i], outputs=outs)


def check_answer(result, x):
    """Non-degraded outputs equal the model's own (float32); degraded ones are finite, of the output's shape."""
    y, body = result.as_numpy("output"), result.get_response()
    deg = body["parameters"]["degraded"]
    deg = [deg] if isinstance(deg, bool) else deg
    assert y.dtype == np.float32 and y.shape == (len(x), *OUT) and len(deg) == len(x)
    assert body["model_name"] == NAME and body["parameters"]["scheme"] == "gcc"
    want = tiny_model(x)
    for d, got, w in zip(deg, y, want, strict=True):
        assert np.isfinite(got).all()
        if not d:
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
    return deg


def test_tritonclient_health_and_metadata(served):
    port, _ = served
    c = client(port)
    assert c.is_server_live() and c.is_server_ready() and c.is_model_ready(NAME)
    assert not c.is_model_ready("another")
    meta = c.get_server_metadata()
    assert meta["name"] == "gencc" and "binary_tensor_data" in meta["extensions"]
    m = c.get_model_metadata(NAME)
    assert m["name"] == NAME and m["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 2, 5]}]
    assert m["outputs"] == [{"name": "output", "datatype": "FP32", "shape": [-1, 3]}]
    assert c.get_model_metadata(NAME, model_version="1") == m
    cfg = c.get_model_config(NAME)  # Triton's configuration extension: dims without the batch axis
    assert cfg["max_batch_size"] == 16 and cfg["input"][0]["dims"] == [2, 5] and cfg["output"][0]["dims"] == [3]
    with pytest.raises(InferenceServerException, match="unknown model 'another'"):
        c.get_model_metadata("another")
    c.close()


@pytest.mark.parametrize("binary_in, binary_out", [(False, False), (False, True), (True, False), (True, True),
                                                   (False, None), (True, None)])
def test_tritonclient_infers_json_and_binary(served, binary_in, binary_out):
    port, _ = served
    c = client(port)
    rng = np.random.default_rng(int(binary_in) * 3 + {None: 0, False: 1, True: 2}[binary_out])
    x = rng.uniform(-1, 1, size=(1, *SHAPE)).astype(np.float32)
    r = infer(c, x, binary_in, binary_out)
    check_answer(r, x)
    assert isinstance(r.get_response()["parameters"]["degraded"], bool)
    out = r.get_response()["outputs"][0]
    assert ("data" not in out) == (binary_out is not False)  # binary unless JSON was asked for
    r = c.infer(NAME, [th.InferInput("input", [1, *SHAPE], "FP32").set_data_from_numpy(x)], request_id="req-7")
    assert r.get_response()["id"] == "req-7"
    c.close()


def test_a_batch_of_16_returns_16_outputs(served):
    port, _ = served
    c = client(port)
    x = np.random.default_rng(5).uniform(-1, 1, size=(16, *SHAPE)).astype(np.float32)
    for binary in (False, True):
        deg = check_answer(infer(c, x, binary, binary), x)
        assert len(deg) == 16 and all(isinstance(d, bool) for d in deg)
    c.close()
    # the JSON tensor flat or nested (row-major) is the same input
    url = f"http://127.0.0.1:{port}/v2/models/{NAME}/infer"
    for data in (x[:3].ravel().tolist(), x[:3].tolist()):
        r = httpx.post(url, json={"inputs": [{"name": "input", "shape": [3, *SHAPE], "datatype": "FP32",
                                              "data": data}]})
        assert r.status_code == 200, r.text
        body = r.json()
        y = np.asarray(body["outputs"][0]["data"], dtype=np.float32).reshape(body["outputs"][0]["shape"])
        for d, got, w in zip(body["parameters"]["degraded"], y, tiny_model(x[:3]), strict=True):
            assert d or np.allclose(got, w, atol=1e-6)


def test_400_infers_from_8_concurrent_clients_alternating_json_and_binary(served):
    port, _ = served
    X = np.random.default_rng(6).uniform(-1, 1, size=(400, *SHAPE)).astype(np.float32)
    answered, errors = [None] * 400, []

    def run(k):
        c = client(port)
        try:
            for i in range(k, 400, 8):
                r = infer(c, X[i:i + 1], binary_in=i % 2 == 1, binary_out=i % 2 == 1)
                answered[i] = (r.as_numpy("output")[0], r.get_response()["parameters"]["degraded"])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))
        finally:
            c.close()

    t = time.perf_counter()
    threads = [threading.Thread(target=run, args=(k,)) for k in range(8)]
    for tt in threads:
        tt.start()
    for tt in threads:
        tt.join(120)
    assert errors == [] and all(a is not None for a in answered), errors[:3]
    want = tiny_model(X)
    exact = [np.allclose(y, w, atol=1e-6) for (y, d), w in zip(answered, want, strict=True) if not d]
    assert all(exact) and len(exact) > 0
    assert time.perf_counter() - t < 60


def post(port, body, ctype="application/json", path=f"/v2/models/{NAME}/infer", headers=None):
    h = {} if ctype is None else {"content-type": ctype}
    return httpx.post(f"http://127.0.0.1:{port}{path}", content=body, headers={**h, **(headers or {})},
                      timeout=10)


def request(data="[0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5]", shape="[1,2,5]", datatype="FP32", name="input",
            extra=""):
    return (f'{{"inputs":[{{"name":"{name}","shape":{shape},"datatype":"{datatype}","data":{data}}}]{extra}}}'
            ).encode()


def binary(x, header_extra=None, size=None, tail=b""):
    """A binary-extension body: the JSON header, then x as little-endian float32."""
    blob = np.asarray(x, dtype="<f4").tobytes()
    head = {"inputs": [{"name": "input", "shape": list(np.shape(x)), "datatype": "FP32",
                        "parameters": {"binary_data_size": len(blob) if size is None else size}}],
            **(header_extra or {})}
    h = json.dumps(head).encode()
    return h + blob + tail, {"Inference-Header-Content-Length": str(len(h))}


BAD = [
    ("wrong shape", request(shape="[1,5,2]"), None, 400, "shape [1, 5, 2]"),
    ("wrong rank", request(shape="[10]"), None, 400, "[B, 2, 5]"),
    ("wrong datatype", request(datatype="FP64"), None, 400, "datatype 'FP64'"),
    ("INT32", request(datatype="INT32", data="[1,1,1,1,1,1,1,1,1,1]"), None, 400, "takes FP32"),
    ("data of the wrong length", request(data="[0.5, 0.5]"), None, 400, "flat list of 10"),
    ("ragged nesting", request(data="[[[1,2,3,4,5],[1,2]]]"), None, 400, "nested as [1, 2, 5]"),
    ("boolean", request(data="[true,0,0,0,0,0,0,0,0,0]"), None, 400, "finite float32"),
    ("numeric string", request(data='["0.5",0,0,0,0,0,0,0,0,0]'), None, 400, "finite float32"),
    ("1e39 (inf in float32)", request(data="[1e39,0,0,0,0,0,0,0,0,0]"), None, 400, "data[0]"),
    ("NaN literal", request(data="[NaN,0,0,0,0,0,0,0,0,0]"), None, 400, "UTF-8 JSON"),
    ("depth 10,000", request(data="[" * 10_000 + "]" * 10_000), None, 400, "recursion"),
    ("malformed JSON", b'{"inputs": [', None, 400, "UTF-8 JSON"),
    ("not an object", b"[1, 2]", None, 400, "not an inference request"),
    ("no inputs", b'{"inputs": []}', None, 400, "not an inference request"),
    ("unknown key", request(extra=', "debug": 1'), None, 400, "debug"),
    ("another input name", request(name="x"), None, 400, "one input named 'input'"),
    ("unknown output", request(extra=', "outputs": [{"name": "logits"}]'), None, 400, "'output'"),
    ("no data", b'{"inputs":[{"name":"input","shape":[1,2,5],"datatype":"FP32"}]}', None, 400, "neither"),
    ("batch over --max-batch", request(shape="[17,2,5]"), None, 400, "1 to 16"),
    ("binary size mismatch", *binary(np.zeros((1, *SHAPE)), size=12), 400, "40 bytes"),
    ("binary data short", binary(np.zeros((1, *SHAPE)))[0][:-4], binary(np.zeros((1, *SHAPE)))[1], 400,
     "36 bytes"),
    ("binary trailing bytes", *binary(np.zeros((1, *SHAPE)), tail=b"1234"), 400, "44 bytes"),
    ("binary NaN", *binary(np.full((1, *SHAPE), np.nan)), 400, "NaN or infinite"),
    ("header length past the body", request(), {"Inference-Header-Content-Length": "99999"}, 400, "within"),
    ("header length not a number", request(), {"Inference-Header-Content-Length": "-1"}, 400, "whole number"),
    ("gzip", request(), {"Content-Encoding": "gzip"}, 415, "uncompressed"),
]


@pytest.mark.parametrize("name, body, headers, status, word", BAD, ids=[b[0] for b in BAD])
def test_each_bad_infer_is_a_4xx_error_object(served, name, body, headers, status, word):
    port, _ = served
    r = post(port, body, headers=headers, ctype="application/octet-stream" if headers else "application/json")
    assert r.status_code == status, r.text
    assert list(r.json()) == ["error"] and word in r.json()["error"], r.text
    assert httpx.get(f"http://127.0.0.1:{port}/v2/health/ready").status_code == 200


def test_routes_methods_models_and_content_types(served):
    port, _ = served
    base = f"http://127.0.0.1:{port}"
    for path, status in [("/v2/models/another/infer", 404), (f"/v2/models/{NAME}/versions/2/infer", 404),
                         (f"/v2/models/{NAME}/stats", 404), ("/v2/repository/index", 404)]:
        r = post(port, request(), path=path)
        assert r.status_code == status and "error" in r.json(), (path, r.text)
    assert post(port, request(), path=f"/v2/models/{NAME}/versions/1/infer").status_code == 200
    assert post(port, request(), ctype=None).status_code == 200  # tritonclient sends no Content-Type
    r = post(port, request(), ctype="text/plain")
    assert r.status_code == 415 and "octet-stream" in r.json()["error"]
    for path, status in [("/v2/models/another", 404), ("/v2/models/another/ready", 404), ("/v2/nothing", 404),
                         (f"/v2/models/{NAME}/infer", 405)]:
        r = httpx.get(base + path)
        assert r.status_code == status and list(r.json()) == ["error"], (path, r.text)
    r = httpx.delete(base + "/v2/health/live")
    assert r.status_code == 405 and "error" in r.json()
    # binary output: the response header gives the JSON part's length, the tensor follows
    body, hdr = binary(np.ones((2, *SHAPE)), header_extra={"parameters": {"binary_data_output": True}})
    r = post(port, body, ctype="application/octet-stream", headers=hdr)
    n = int(r.headers["inference-header-content-length"])
    head = json.loads(r.content[:n])
    assert r.headers["content-type"] == "application/octet-stream"
    assert head["outputs"][0]["parameters"]["binary_data_size"] == len(r.content) - n == 2 * 3 * 4
    y = np.frombuffer(r.content[n:], dtype="<f4").reshape(2, 3)
    for d, got in zip(head["parameters"]["degraded"], y, strict=True):
        assert d or np.allclose(got, tiny_model(np.ones((1, *SHAPE)))[0], atol=1e-6)


def exchange(port, raw, read_s=5.0):
    """Send raw bytes; (status, body as JSON, seconds to the answer)."""
    with socket.create_connection(("127.0.0.1", port), timeout=read_s) as s:
        t = time.perf_counter()
        try:
            s.sendall(raw)
        except OSError:
            pass
        data = b""
        while chunk := s.recv(65536):
            data += chunk
            head, _, rest = data.partition(b"\r\n\r\n")
            n = next((int(ln.split(b":")[1]) for ln in head.split(b"\r\n")
                      if ln.lower().startswith(b"content-length")), None)
            if n is not None and len(rest) >= n:
                break
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1") else 0
    return status, json.loads(rest or b"null"), time.perf_counter() - t


def test_body_limits_and_slow_bodies_on_the_v2_routes(served):
    port, _ = served
    path = f"/v2/models/{NAME}/infer"
    status, body, elapsed = exchange(port, f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                           f"Content-Length: {50 * 2 ** 20}\r\n\r\n".encode())
    assert status == 413 and "limit" in body["error"] and elapsed < 1.0
    chunk = b"%x\r\n%s\r\n" % (2 ** 20, b"[" * 2 ** 20)
    status, body, elapsed = exchange(port, f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/"
                                           "octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n".encode() + chunk * 2)
    assert status == 413 and "limit" in body["error"] and elapsed < 1.0
    t = time.perf_counter()
    status, body, _ = exchange(port, f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                     "Content-Length: 1000\r\n\r\n{\"inputs\": [".encode())  # half a body
    assert status == 408 and "0.5 s" in body["error"] and time.perf_counter() - t < 2.0
    assert httpx.get(f"http://127.0.0.1:{port}/v2/health/ready").status_code == 200


def test_readiness_is_healthz():
    """/v2/health/ready and the model's ready answer what /healthz answers: 503 while fewer workers live than
    the scheme needs at once, 200 again once they are back."""
    svc = tiny_service()
    app = create_app(svc, in_shape=SHAPE, out_shape=OUT)  # the default name
    server, thread, port = start_server(app)
    base = f"http://127.0.0.1:{port}"
    try:
        assert httpx.get(base + "/v2/models/model/ready").status_code == 200
        svc.pool.dead[:3] = True
        assert httpx.get(base + "/healthz").status_code == 503
        for path in ("/v2/health/ready", "/v2/models/model/ready"):
            r = httpx.get(base + path)
            assert r.status_code == 503 and "degraded" in r.json()["error"]
        assert httpx.get(base + "/v2/health/live").json() == {"live": True}
        svc.pool.dead[:3] = False
        assert httpx.get(base + "/v2/health/ready").json() == {"ready": True}
    finally:
        server.should_exit = True
        thread.join(20)


def test_api_key_refusal_on_v2_is_an_error_object():
    svc = tiny_service("uncoded")
    app = create_app(svc, limits=Limits(api_key="s3cret-key"), in_shape=SHAPE, out_shape=OUT)
    server, thread, port = start_server(app)
    try:
        r = httpx.get(f"http://127.0.0.1:{port}/v2/models/model")
        assert r.status_code == 401 and "API key" in r.json()["error"]
        c = th.InferenceServerClient(f"127.0.0.1:{port}")
        x = np.zeros((1, *SHAPE), dtype=np.float32)
        i = th.InferInput("input", [1, *SHAPE], "FP32")
        i.set_data_from_numpy(x)
        r = c.infer("model", [i], headers={"Authorization": "Bearer s3cret-key"})
        np.testing.assert_allclose(r.as_numpy("output"), tiny_model(x), atol=1e-6)
        c.close()
    finally:
        server.should_exit = True
        thread.join(20)


MODEL_FILE = '''
import numpy as np

W = np.linspace(-1, 1, 30).reshape(10, 3)


def f(x):
    x = np.asarray(x, dtype=np.float32).reshape(len(x), -1)
    return np.tanh(x @ W.astype(np.float32)).astype(np.float64)
'''


def test_gencc_serve_model_and_name_speak_v2(tmp_path, monkeypatch):
    """`gencc serve --model SPEC --name NAME`: tritonclient finds the model under NAME with the shapes read from
    the model, and gets the model's own answer; a name that cannot be a path segment exits 2 first."""
    import uvicorn
    from typer.testing import CliRunner

    from gencc.cli import app as cli

    (tmp_path / "v2_tiny.py").write_text(MODEL_FILE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    r = CliRunner().invoke(cli, ["serve", "--model", "v2_tiny:f", "--input-shape", "2,5", "--name", "a/b"])
    assert r.exit_code == 2 and "--name" in r.output and "Traceback" not in r.output
    seen = {}

    def fake_run(app_, host, port, **kwargs):  # serve on a free port in a thread, as a client would see it
        server, thread, p = start_server(app_)
        try:
            c = client(p)
            seen["meta"] = c.get_model_metadata("my-net")
            x = np.random.default_rng(9).uniform(-1, 1, size=(4, *SHAPE)).astype(np.float32)
            seen["answer"] = (x, infer(c, x, True, True, model="my-net"))
            c.close()
        finally:
            server.should_exit = True
            thread.join(20)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(uvicorn, "run", fake_run)
    r = CliRunner().invoke(cli, ["serve", "--model", "v2_tiny:f", "--input-shape", "2,5", "--name", "my-net",
                                 "--scheme", "gcc", "--workers", "6", "--K", "3", "--port", str(port)])
    assert r.exit_code == 0, r.output
    assert "/v2/models/my-net" in r.output
    assert seen["meta"]["inputs"][0]["shape"] == [-1, 2, 5] and seen["meta"]["outputs"][0]["shape"] == [-1, 3]
    x, result = seen["answer"]
    body = result.get_response()
    assert body["model_name"] == "my-net" and body["parameters"]["scheme"] == "gcc"
    for d, got, w in zip(body["parameters"]["degraded"], result.as_numpy("output"), tiny_model(x), strict=True):
        assert d or np.allclose(got, w, atol=1e-6)


@pytest.mark.parametrize("scheme", ["uncoded", "replication", "hedged", "bacc", "sgcc", "gcc-hedge"])
def test_every_scheme_answers_v2(scheme):
    """The protocol sits on the service, not on a scheme: each answers a batch, naming itself."""
    svc = tiny_service(scheme)
    app = create_app(svc, in_shape=SHAPE, out_shape=OUT, name=NAME)
    server, thread, port = start_server(app)
    try:
        c = client(port)
        x = np.random.default_rng(11).uniform(-1, 1, size=(4, *SHAPE)).astype(np.float32)
        body = infer(c, x, True, False).get_response()
        assert body["parameters"]["scheme"] == svc.scheme and len(body["parameters"]["degraded"]) == 4
        y = np.asarray(body["outputs"][0]["data"], dtype=np.float32).reshape(4, *OUT)
        for d, got, w in zip(body["parameters"]["degraded"], y, tiny_model(x), strict=True):
            assert d or np.allclose(got, w, atol=1e-6)
        c.close()
    finally:
        server.should_exit = True
        thread.join(20)


def test_the_parser_refuses_any_body_with_a_protocol_error():
    """Arbitrary bytes, JSON values and near-valid requests, with or without a binary header length, end in a
    parsed input or a ProtocolError (400), never another exception."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from gencc.serving._http.v2 import ModelSpec, ProtocolError

    spec = ModelSpec(NAME, SHAPE, OUT, max_batch=4)
    scalars = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.floats(), st.text(max_size=5))
    values = st.recursive(scalars, lambda s: st.one_of(st.lists(s, max_size=12),
                                                       st.dictionaries(st.text(max_size=8), s, max_size=4)),
                          max_leaves=40)
    tensor = st.fixed_dictionaries({"name": st.sampled_from(["input", "x", 3]),
                                    "shape": st.one_of(st.just([1, 2, 5]), st.lists(st.integers(-2, 20), max_size=4)),
                                    "datatype": st.sampled_from(["FP32", "FP64", "BYTES", None])},
                                   optional={"data": values, "parameters": values})
    near = st.fixed_dictionaries({"inputs": st.lists(tensor, max_size=2)}, optional={
        "outputs": values, "parameters": values, "id": values})
    bodies = st.one_of(st.binary(max_size=200), near.map(lambda d: json.dumps(d).encode()),
                       values.map(lambda v: json.dumps(v).encode()))

    @settings(max_examples=400, deadline=None)
    @given(bodies, st.one_of(st.none(), st.integers(-5, 300)), st.binary(max_size=48))
    def check(body, header_length, tail):
        try:
            inf = spec.parse(body + tail if header_length is not None else body, header_length)
        except ProtocolError as e:
            assert e.status == 400 and e.message
        else:
            assert inf.x.dtype == np.float32 and inf.x.shape[1:] == SHAPE and np.isfinite(inf.x).all()

    check()


def test_the_quick_check_of_common_requests_answers_as_the_models_do():
    """Requests near the common one (one flat FP32 input; numbers, booleans, strings, huge or non-float32
    values, nested data, stray keys and parameters mutated in): the parse with its quick check of common requests
    gives the same inputs, or the same refusal, as the parse through the pydantic models alone."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from gencc.serving._http.v2 import ModelSpec, ProtocolError

    spec = ModelSpec(NAME, SHAPE, OUT, max_batch=4)
    models_only = ModelSpec(NAME, SHAPE, OUT, max_batch=4)
    models_only._plain = lambda obj: None
    f32 = float(np.finfo(np.float32).max)
    number = st.one_of(st.floats(-1e3, 1e3), st.integers(-2 ** 70, 2 ** 70))
    edge = st.sampled_from([f32, -f32, 3.4028235677973366e38, -3.4028235677973366e38, 1e39, 10 ** 39, 10 ** 400,
                            2 ** 63, -0.0, 1e-45])
    odd = st.one_of(edge, edge, edge, st.booleans(), st.none(), st.text(max_size=3), st.lists(number, max_size=2))
    other = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=4), st.just({}),
                      st.dictionaries(st.sampled_from(["timeout", "exact_only", "binary_data_output", "binary_data",
                                                       "classification", "binary_data_size", "x"]),
                                      st.one_of(st.booleans(), st.integers(-2, 10 ** 7), st.none()), max_size=2))

    good = st.fixed_dictionaries({}, optional={
        "id": st.text(max_size=4), "parameters": st.fixed_dictionaries({}, optional={
            "timeout": st.integers(1, 10 ** 7), "exact_only": st.booleans(), "binary_data_output": st.booleans()}),
        "outputs": st.just([{"name": "output"}]) | st.builds(lambda v: [{"name": "output", "parameters": {
            "binary_data": v}}], st.booleans())})

    @st.composite
    def common(draw):
        b = draw(st.integers(1, 4))
        data = draw(st.lists(number, min_size=b * 10, max_size=b * 10))
        if draw(st.booleans()):  # one value of another kind among the numbers
            data[draw(st.integers(0, len(data) - 1))] = draw(odd)
        return json.dumps({"inputs": [{"name": "input", "shape": [b, 2, 5], "datatype": "FP32", "data": data}],
                           **draw(good)}).encode()

    @st.composite
    def request(draw):
        b = draw(st.integers(0, 5))
        n = b * 10 + draw(st.sampled_from([0, 0, 0, 1, -1]))
        data = draw(st.lists(number, min_size=max(n, 0), max_size=max(n, 0)) if draw(st.integers(0, 5)) else
                    st.just(np.zeros((b, *SHAPE)).tolist()))
        if data and draw(st.integers(0, 2)) == 0:  # one value of another kind among the numbers
            data[draw(st.integers(0, len(data) - 1))] = draw(odd)
        t = {"name": draw(st.sampled_from(["input"] * 5 + ["x", 3])), "shape": draw(st.sampled_from(
            [[b, 2, 5]] * 6 + [[b, 10], [b, 2, 5, 1], [True, 2, 5], [b, 2.0, 5]])),
             "datatype": draw(st.sampled_from(["FP32"] * 6 + ["FP64", 1])), "data": data}
        body = {"inputs": [t]}
        for key in draw(st.lists(st.sampled_from(["id", "model_name", "model_version", "parameters", "outputs",
                                                  "extra", "tensor_parameters", "tensor_extra", "two_inputs"]),
                                 max_size=3, unique=True)):
            if key == "outputs":
                body["outputs"] = draw(st.one_of(other, st.lists(st.fixed_dictionaries(
                    {"name": st.sampled_from(["output", "y", 1])}, optional={"parameters": other}), max_size=2)))
            elif key == "tensor_parameters":
                t["parameters"] = draw(other)
            elif key == "tensor_extra":
                t["extra"] = 1
            elif key == "two_inputs":
                body["inputs"] = [t, t]
            else:
                body[key] = draw(other if key in ("parameters", "extra") else st.one_of(st.text(max_size=3), other))
        return json.dumps(body).encode()

    def outcome(s, body):
        try:
            inf = s.parse(body, None)
        except ProtocolError as e:
            return e.status, e.message
        return inf.x.dtype, inf.x.shape, inf.x.tobytes(), inf.id, inf.binary_output, inf.deadline_ms, inf.exact_only

    seen = {"quick": 0, "refused": 0}

    @settings(max_examples=250, deadline=None)
    @given(common() | request())
    def check(body):
        got = outcome(spec, body)
        assert got == outcome(models_only, body)
        seen["quick"] += spec._plain(json.loads(body)) is not None
        seen["refused"] += len(got) == 2

    check()
    assert seen["quick"] > 50 and seen["refused"] > 50  # both kinds were among them


def test_an_output_beyond_float32_is_a_500_error_object():
    from types import SimpleNamespace

    from gencc.serving._http.v2 import Inference, ModelSpec, answer

    spec = ModelSpec(NAME, SHAPE, OUT, max_batch=4)
    inf = Inference(np.zeros((2, *SHAPE), np.float32), "a", False)
    ok = SimpleNamespace(status=200, output=np.ones(3), degraded=False, id=1)
    big = SimpleNamespace(status=200, output=np.array([1e39, 0, 0]), degraded=True, id=2)
    status, body, blob = answer(spec, "gcc", inf, [ok, big])
    assert status == 500 and "not finite" in body["error"] and blob == b""
    late = SimpleNamespace(status=504, error="request timed out", degraded=False, id=3)
    assert answer(spec, "gcc", inf, [ok, late])[:2] == (504, {"error": "input 1 of 2: request timed out"})
    status, body, _ = answer(spec, "gcc", inf, [ok, ok])
    assert status == 200 and body["id"] == "a" and body["parameters"]["degraded"] == [False, False]
