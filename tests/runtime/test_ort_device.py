"""The IOBinding backend (what `ort-cuda` runs) on the CPU over numpy memory: buffers bound by
address, staged inputs, pools committed through pointer tables, static pieces padded to
buckets, draws made by the graphs (argmax in the target, the sampler graph on its logits). It
must produce exactly what `ort-cpu` produces."""

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

from cellspec.artifact import Manifest
from cellspec.errors import InvalidArgument
from cellspec.runtime import device_engine, ort_device
from cellspec.runtime.bindings import GraphIds, evaluate, learn_dims, shape_of, step_dims
from cellspec.runtime.device import HostDevice
from cellspec.runtime.dflash import DFlashExecutor
from cellspec.runtime.executor import Executor
from cellspec.runtime.ort_device import OrtDeviceBackend, device_limits, device_policy
from cellspec.runtime.types import BatchInput

from .test_dflash_oracle import spec_decode
from .test_executor import GREEDY, SAMPLED, decode, prompts, run_alone


def host_backend(artifact, max_sessions, attention="as-exported"):
    manifest = Manifest.load(artifact)
    return OrtDeviceBackend("ort-host", HostDevice(), ["CPUExecutionProvider"],
                            device_limits(manifest, max_sessions), device_policy(manifest),
                            artifact / manifest.graphs["sample"], attention)


def prefill(executor, texts, sampling, seeds):
    """A session per prompt with its sampling and seed, prefilled in one batch: (sids, the
    first token of each)."""
    sids = [executor.open_session() for _ in texts]
    for sid, seed in zip(sids, seeds):
        executor.set_sampling(sid, sampling, seed)
    outs = executor.execute([BatchInput(s, tuple(p), 0) for s, p in zip(sids, texts)])
    return sids, [o.token for o in outs]


@pytest.mark.parametrize("attention", ["as-exported", "decomposed", "grouped"])
@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_bound_batch_equals_cpu_alone(tiny_artifact, sampling, attention):
    """Also with every Attention rewritten into standard ops (what ort-cuda runs for float32
    graphs, sliding windows and draft blocks), and into GroupQueryAttention over the gathered
    cells (what ort-cuda runs for float16 targets: here on the CPU's kernel)."""
    cpu = Executor.load(tiny_artifact, max_sessions=8)
    texts = prompts(6, seed=3)
    alone = [run_alone(cpu, p, sampling, seed=20 + i, steps=10) for i, p in enumerate(texts)]
    bound = Executor.load(tiny_artifact, backend=host_backend(tiny_artifact, 8, attention),
                          max_sessions=8)
    sids, firsts = prefill(bound, texts, sampling, range(20, 26))
    batched = [[f] + rest for f, rest in zip(firsts, decode(bound, sids, firsts, 9))]
    assert batched == alone
    # decode steps were static: 6 rows padded to the bucket of 8, cells to powers of two
    assert any(key.startswith("static 8x1") for key in bound.target.stats)
    for sid in sids:
        bound.close_session(sid)
    assert bound.cache.num_used == 0


def test_bound_pools_hold_what_cpu_pools_hold(tiny_artifact):
    """The commit kernel's work: every session's cells carry the same keys as on ort-cpu."""
    texts = prompts(3, seed=9)
    runs = []
    for backend in ("ort-cpu", host_backend(tiny_artifact, 4)):
        executor = Executor.load(tiny_artifact, backend=backend, max_sessions=4)
        sids = [executor.open_session() for _ in texts]
        for sid in sids:
            executor.set_sampling(sid, GREEDY)
        executor.execute([BatchInput(s, tuple(p), 0) for s, p in zip(sids, texts)])
        pools = executor.target.pools
        keys = []
        for sid in sids:
            cells = executor.cache.cells_of(sid)
            if hasattr(pools, "arrays"):
                keys.append(pools.arrays["k_pool.1"][cells])
            else:
                buffer = pools.buffers["k_pool.1"]
                rows = np.empty(pools.shape, np.float32)
                pools.device.download(rows, buffer)
                keys.append(rows[cells])
        runs.append(keys)
    for cpu, bound in zip(*runs):
        np.testing.assert_allclose(bound, cpu, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("attention", ["decomposed", "grouped"])
@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_bound_speculation_equals_cpu_plain(dflash_artifact, sampling, attention):
    plain = Executor.load(dflash_artifact, max_sessions=4)
    texts = prompts(3, seed=5)
    expected = [run_alone(plain, p, sampling, seed=7 + i, steps=16) for i, p in enumerate(texts)]
    spec = DFlashExecutor.load(dflash_artifact,
                               backend=host_backend(dflash_artifact, 4, attention),
                               max_sessions=4)
    host = DFlashExecutor.load(dflash_artifact, max_sessions=4)
    proposed = {}
    for name, executor in (("bound", spec), ("host", host)):
        sids = [executor.open_session() for _ in texts]
        for i, sid in enumerate(sids):
            executor.set_sampling(sid, sampling, 7 + i)
        proposed[name] = record_proposals(executor)
        assert spec_decode(executor, sids, texts, 14) == [e[:14] for e in expected]
    # the same proposals: the bound drain (behind each verify) read the verify's taps
    assert spec.stats.cycles > 0 and len(proposed["bound"]) == spec.stats.rounds
    assert proposed["bound"] == proposed["host"]
    assert any(key.startswith("draft_block [4x") for key in spec.draft.stats)
    # drains within a static width ran padded to static shapes (a CUDA graph each on the
    # GPU): 3 sessions in a bucket of 4 rows; only a prompt's long drain ran dynamic
    drains = [key.split()[1:] for key in spec.draft.stats if key.startswith("draft_context")]
    widest = max(spec.draft.policy.static_widths)
    assert any(kind == "static" and shape.startswith("4x") for kind, shape in drains)
    assert all(int(shape.split("x")[1]) > widest for kind, shape in drains if kind == "dynamic")


@pytest.mark.parametrize("drawn_first,views", [(True, 64), (False, 64), (True, 0)],
                         ids=["first", "after", "no-page-locked-views-left"])
@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_a_verify_queues_its_tokens_for_the_host_before_the_drain_behind_it(
        dflash_artifact, sampling, drawn_first, views, monkeypatch):
    """A verify's drawn tokens are copied to page-locked memory in the device's order before
    the drain behind it is queued, so on a device they come back when the verify ends, not
    when the drain does (drawn_first=False, or no page-locked view left for the shape: fetched
    after the drain, as before); the text is plain decoding's either way."""
    monkeypatch.setattr(ort_device, "PINNED_VIEWS", views)
    first = drawn_first and views > 0  # whether the tokens should come before the drain
    plain = Executor.load(dflash_artifact, max_sessions=4)
    texts = prompts(2, seed=8)
    expected = [run_alone(plain, p, sampling, seed=3 + i, steps=12) for i, p in enumerate(texts)]
    backend = host_backend(dflash_artifact, 4)
    backend.drawn_first = drawn_first
    spec = DFlashExecutor.load(dflash_artifact, backend=backend, max_sessions=4)
    events = []
    device, drain_cells = backend.device, spec._drain_cells
    later, download = device.download_later, device.download

    def sources():  # the buffers a verify's tokens are drawn into: the argmax, the sampler's
        found = {spec.target.engine.buffers["greedy"].ptr: "tokens"}
        if backend.sampler is not None:
            found[backend.sampler.buffers["tokens"].ptr] = "tokens"
        return found

    def recording_later(host, ptr):
        events.append(("queued", sources().get(ptr)))
        later(host, ptr)

    def recording_download(host, buffer):
        events.append(("fetched", sources().get(buffer.ptr)))
        download(host, buffer)

    def recording_drain(runs, positions=None):
        if sum(cells.size for _, cells in runs):
            events.append(("drain", None))
        drain_cells(runs, positions)

    device.download_later, device.download = recording_later, recording_download
    spec._drain_cells = recording_drain
    sids = [spec.open_session() for _ in texts]
    for i, sid in enumerate(sids):
        spec.set_sampling(sid, sampling, 3 + i)
    assert spec_decode(spec, sids, texts, 10) == [e[:10] for e in expected]
    assert spec.stats.rounds > 2
    # every drain runs behind a verify, whose tokens are queued for the host before it
    queued = events.count(("queued", "tokens"))
    assert queued == (spec.stats.rounds if first else 0)
    drains = [i for i, (kind, _) in enumerate(events) if kind == "drain"]
    assert len(drains) == spec.stats.rounds + 1  # the prompts' at the first cycle's start
    for i in drains[1:]:
        before = [e for e in events[:i] if e[1] == "tokens"][-1]
        after = [e for e in events[i:] if e[1] == "tokens"]
        if first:  # queued before the drain; nothing waited for after it
            assert before == ("queued", "tokens") and after[:1] != [("fetched", "tokens")]
        else:
            assert after[0] == ("fetched", "tokens")


def record_proposals(executor) -> list:
    """The executor's draft proposals, one list per speculate round, as it makes them."""
    proposed, propose = [], executor.draft.propose

    def recording(requests, n_draft):
        rows = propose(requests, n_draft)
        proposed.append(rows.tolist())
        return rows

    executor.draft.propose = recording  # the proposer is the draft
    return proposed


def test_limits_and_policy_follow_the_manifest(dflash_artifact):
    manifest = Manifest.load(dflash_artifact)
    widths, buckets = manifest.target.static_widths, manifest.target.batch_buckets
    limits = device_limits(manifest, max_sessions=40)
    assert limits == {"S": 40, "Q": manifest.max_step_width, "N": manifest.max_context,
                      "R": 40 * max(widths[-1], manifest.draft.block_size), "O": 40,
                      "P": manifest.draft.block_size}
    policy = device_policy(manifest)
    assert (policy.static_widths, policy.batch_buckets) == (widths, buckets)
    assert policy.max_cells == manifest.max_context


def test_dims_are_learnt_from_inputs_and_give_output_shapes():
    inputs = {"tokens": ("S", "Q"), "cell_table": ("S", "N"), "attn_mask": ("S", 1, "Q", "N + Q")}
    dims = step_dims(inputs, {"tokens": (4, 2), "cell_table": (4, 64),
                              "attn_mask": (4, 1, 2, 66)})
    assert dims == {"S": 4, "Q": 2, "N": 64}
    assert shape_of(("S", "Q", 192), dims) == (4, 2, 192)
    assert evaluate("O * 4", {"O": 3}) == 12 and evaluate("N + 4", {"N": 5}) == 9
    with pytest.raises(InvalidArgument, match="dim S is 5"):
        learn_dims(("S", "N"), (5, 64), dict(dims), "cell_table")
    with pytest.raises(InvalidArgument, match="size 3"):
        learn_dims(("S", 1), (4, 3), {}, "mask")
    with pytest.raises(InvalidArgument, match="no value for R"):
        evaluate("R", dims)


def test_graph_ids_are_stable_and_bounded():
    ids = GraphIds(limit=2)
    assert [ids.get(k) for k in ("a", "b", "a", "c", None, "b")] == [0, 1, 0, -1, -1, 1]


def test_nodes_the_cuda_provider_cannot_run_are_named(tmp_path):
    from onnx import TensorProto, helper

    from cellspec.errors import InvalidArtifact
    from cellspec.runtime.device_sessions import (
        CUDA_KERNEL_GAPS,
        _check_placeable,
        unsupported_nodes,
    )

    graph = helper.make_graph(
        [helper.make_node("ReduceMax", ["x"], ["m"], name="/norm/ReduceMax", keepdims=1),
         helper.make_node("Cast", ["m"], ["y"], name="/cast", to=TensorProto.FLOAT),
         helper.make_node("ArgMax", ["y"], ["z"], name="/argmax")],
        "g", [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2, 3])],
        [helper.make_tensor_value_info("z", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    # ArgMax on float32 runs; ReduceMax on bfloat16 has no CUDA kernel
    assert unsupported_nodes(model, CUDA_KERNEL_GAPS) == ["/norm/ReduceMax (ReduceMax on bfloat16)"]
    path = tmp_path / "g.onnx"
    onnx_save(model, path)
    with pytest.raises(InvalidArtifact, match=r"no kernel for node /norm/ReduceMax"):
        _check_placeable(path, [("CUDAExecutionProvider", {})])
    _check_placeable(path, ["CPUExecutionProvider"])  # the CPU provider runs it


def test_weight_layouts_fold_whatever_their_size(tmp_path):
    """ONNX Runtime (1.27 on) folds a node on initializers only where its output fits a limit,
    1 GiB unless a session sets another: a rewrite's weight layout over that (Qwen3-8B's LM
    head tiled for RowMatMul, 1.24 GB) ran at every step. fold_limit covers the largest
    initializer, read from its header alone, and session_options hands ONNX Runtime the
    limit: a Transpose of a weight over it stays in the optimised graph, one within it folds,
    and both compute the same."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from cellspec.runtime.device_sessions import DEFAULT_FOLD_LIMIT, fold_limit, session_options

    def headers(*tensors):
        return helper.make_model(helper.make_graph([], "g", [], [], list(tensors)))

    head = TensorProto(name="head", dims=[151936, 4096], data_type=TensorProto.FLOAT16,
                       data_location=TensorProto.EXTERNAL)
    norm = TensorProto(name="norm", dims=[4096], data_type=TensorProto.FLOAT,
                       data_location=TensorProto.EXTERNAL)
    assert fold_limit(headers(head, norm)) == 151936 * 4096 * 2
    assert fold_limit(headers(norm)) == DEFAULT_FOLD_LIMIT == 1 << 30
    assert fold_limit(headers()) == DEFAULT_FOLD_LIMIT
    unknown = TensorProto(name="unknown", dims=[1 << 20, 4096], data_type=0)  # no such type
    assert fold_limit(headers(unknown, norm)) == DEFAULT_FOLD_LIMIT

    w = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)  # 8,192 bytes
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
         helper.make_node("Mul", ["x", "wt"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 64])],
        [numpy_helper.from_array(w, "w")])
    path = tmp_path / "g.onnx"
    onnx_save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    x = np.random.default_rng(0).standard_normal((32, 64)).astype(np.float32)
    for folds, kept in ((4096, ["Transpose", "Mul"]), (8192, ["Mul"])):
        options = session_options(["CPUExecutionProvider"], folds=folds)
        options.optimized_model_filepath = str(tmp_path / f"optimised-{folds}.onnx")
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        optimised = onnx.load(options.optimized_model_filepath)
        assert [n.op_type for n in optimised.graph.node] == kept
        np.testing.assert_array_equal(session.run(None, {"x": x})[0], x * w.T)


def test_a_rewritten_graph_is_opened_with_its_fold_limit(dflash_artifact, monkeypatch):
    """load_session hands a rewritten graph's session fold_limit of that graph: with the default
    limit lowered to a byte, the session's limit is its largest initializer's size, and the
    session still runs the graph."""
    import onnx

    from cellspec.runtime import device_sessions

    limits = []
    original = device_sessions.session_options

    def recorded(providers, library=None, weights=None, folds=device_sessions.DEFAULT_FOLD_LIMIT):
        limits.append(folds)
        return original(providers, library, weights, folds)

    monkeypatch.setattr(device_sessions, "session_options", recorded)
    monkeypatch.setattr(device_sessions, "DEFAULT_FOLD_LIMIT", 1)
    path = dflash_artifact / Manifest.load(dflash_artifact).target.graph
    model = device_sessions.rewritten(onnx.load(str(path), load_external_data=False),
                                      "decomposed", "cublas")
    largest = max(device_sessions._tensor_bytes(t) for t in model.graph.initializer)
    assert largest > 1
    session = device_sessions.load_session(path, ["CPUExecutionProvider"], "decomposed")
    assert limits == [largest]
    assert {i.name for i in session.get_inputs()} >= {"tokens", "positions"}


def onnx_save(model, path):
    import onnx

    onnx.save(model, str(path))


def test_exact_shapes_after_another_draw_kind(tiny_artifact):
    """Unpadded steps (no CUDA graphs) of varying row counts, greedy then sampled on one
    executor: every graph output is rebound at the step's shape (a greedy output left bound
    at an earlier step's rows was refused by ONNX Runtime)."""
    from cellspec.runtime.planner import ShapePolicy

    cpu = Executor.load(tiny_artifact, max_sessions=4)
    bound = Executor.load(tiny_artifact, backend=host_backend(tiny_artifact, 4), max_sessions=4)
    bound.target.policy = ShapePolicy()
    texts = prompts(4, seed=11)
    for sampling in (GREEDY, SAMPLED, GREEDY):
        expected = [run_alone(cpu, p, sampling, seed=3 + i, steps=6) for i, p in enumerate(texts)]
        sids, firsts = prefill(bound, texts, sampling, range(3, 7))
        got = [[f] + rest for f, rest in zip(firsts, decode(bound, sids, firsts, 5))]
        assert got == expected
        for sid in sids:
            bound.close_session(sid)
    assert not any(key.startswith("static") for key in bound.target.stats)


def test_cuda_provider_keeps_float32_matmuls_in_float32():
    """TF32 (the CUDA provider's default) rounded float32 MatMuls to 10 bits on the H200, and
    speculation then changed tokens in 5% of prompts; the backend turns it off."""
    from cellspec.runtime.ort_device import CUDA_PROVIDER_OPTIONS

    assert CUDA_PROVIDER_OPTIONS["use_tf32"] == "0"
    assert CUDA_PROVIDER_OPTIONS["enable_cuda_graph"] == "1"


class CountingBinding:
    """An IOBinding that counts the binds made through it."""

    def __init__(self, binding, binds: list[str] | None = None) -> None:
        self.inner, self.binds = binding, [] if binds is None else binds

    def bind_input(self, name, *args):
        self.binds.append(name)
        self.inner.bind_input(name, *args)

    def bind_output(self, name, *args):
        self.binds.append(name)
        self.inner.bind_output(name, *args)

    def __getattr__(self, attribute):
        return getattr(self.inner, attribute)


def count_binds(monkeypatch) -> list[str]:
    """The names every IOBinding made from now on binds, in order (CountingBinding)."""
    binds: list[str] = []
    made = device_engine._Binding.__init__

    def counting(self, session):
        made(self, session)
        self.binding = CountingBinding(self.binding, binds)

    monkeypatch.setattr(device_engine._Binding, "__init__", counting)
    return binds


def test_a_step_binds_only_what_moved(tiny_artifact, monkeypatch):
    """Pools and buffers are bound once per layout of a step's feeds: a decode step of the
    shape of the one before rebinds nothing (each bind is a host call; at 60 pools and 60
    outputs they were a third of a SmolLM2 step on the H200), nor does a step of a shape seen
    before after one of another shape (each layout keeps its own IOBinding: a prefill, then
    decode steps or verifies, rebound every output at each change), and the tokens stay those
    of ort-cpu."""
    binds = count_binds(monkeypatch)
    cpu = Executor.load(tiny_artifact, max_sessions=4)
    texts = prompts(3, seed=5)
    alone = [run_alone(cpu, p, GREEDY, seed=1, steps=6) for p in texts]
    bound = Executor.load(tiny_artifact, backend=host_backend(tiny_artifact, 4), max_sessions=4)
    engine = bound.target.engine
    sids, firsts = prefill(bound, texts, GREEDY, [1] * len(texts))
    produced = {sid: [token] for sid, token in zip(sids, firsts)}
    steps = [list(binds)]  # the prefill
    for live in [sids] * 3 + [sids[:1], sids]:  # the last: a shape seen before the one before
        binds.clear()
        for sid, (token,) in zip(live, decode(bound, live, [produced[s][-1] for s in live], 1)):
            produced[sid].append(token)
        steps.append(list(binds))
    assert [produced[sid] for sid in sids] == [a[:len(produced[sid])]
                                               for sid, a in zip(sids, alone)]
    assert len(produced[sids[0]]) == 6 and len(produced[sids[1]]) == 5
    pools = {n for n in engine.inputs if n.startswith(("k_pool.", "v_pool."))}
    assert pools and pools <= set(steps[0])  # bound at the first run of a layout only
    assert steps[1] and pools <= set(steps[1])  # the first decode step: a new layout
    # the same shape (4 rows, 64 cells); one row (a layout the prefill's last piece made); 4
    # rows again: each bound as its layout's last step left it
    assert steps[2:] == [[], [], [], []]
    tokens = [dict((name, shape) for name, shape, _ in layout[0])["tokens"]
              for layout in engine.main.bindings]  # static layouts: one IOBinding each
    assert tokens.index((1, 1)) < tokens.index((4, 1)) == len(tokens) - 1
    # prompts wider than the widest static width (8) run dynamic steps, which share one
    # IOBinding: a width not seen before rebinds its inputs and outputs, never the pools
    layouts = list(engine.main.bindings)
    for width in (12, 14):
        prompt = (list(texts[0]) * 4)[:width]
        sid = bound.open_session()
        bound.set_sampling(sid, GREEDY, 1)
        binds.clear()
        first = bound.execute([BatchInput(sid, tuple(prompt), 0)])[0].token
        assert binds and not pools & set(binds), width
        assert first == run_alone(cpu, prompt, GREEDY, seed=1, steps=1)[0]
        bound.close_session(sid)
    assert list(engine.main.bindings) == layouts


@pytest.mark.parametrize("kept", [2, 3])
def test_a_layout_whose_binding_was_dropped_binds_everything_again(tiny_artifact,
                                                                     monkeypatch, kept):
    """Past MAX_BINDINGS static layouts the least recently used IOBinding is dropped; a later
    step of that layout makes a new one and binds its pools, inputs and outputs again. Steps
    cycling through three layouts: with two kept, every step rebinds the pools; with three,
    none after the first round. Either way the tokens are ort-cpu's."""
    binds = count_binds(monkeypatch)
    monkeypatch.setattr(device_engine._Session, "MAX_BINDINGS", kept)
    cpu = Executor.load(tiny_artifact, max_sessions=4)
    texts = prompts(3, seed=9)
    alone = [run_alone(cpu, p, GREEDY, seed=1, steps=10) for p in texts]
    bound = Executor.load(tiny_artifact, backend=host_backend(tiny_artifact, 4), max_sessions=4)
    engine = bound.target.engine
    sids, firsts = prefill(bound, texts, GREEDY, [1] * len(texts))
    produced = {sid: [token] for sid, token in zip(sids, firsts)}
    pools = {n for n in engine.inputs if n.startswith(("k_pool.", "v_pool."))}
    rebound = []
    for live in [sids, sids[:2], sids[:1]] * 3:  # rows 4, 2 and 1: three layouts
        binds.clear()
        for sid, (token,) in zip(live, decode(bound, live, [produced[s][-1] for s in live], 1)):
            produced[sid].append(token)
        assert len(engine.main.bindings) <= kept
        rebound.append(pools <= set(binds))
    assert rebound[3:] == [kept == 2] * 6
    assert [produced[sid] for sid in sids] == [a[:len(produced[sid])]
                                               for sid, a in zip(sids, alone)]
    assert [len(produced[sid]) for sid in sids] == [10, 7, 4]


def test_a_step_copies_its_inputs_to_the_device_in_one_call(tiny_artifact):
    """The host inputs of a step (tokens, positions, cell table, mask, rows) and the cells its
    commit writes are packed into one arena: one upload at every step (two until 2026-12-07,
    seventeenth sitting). Each input is bound inside the arena, at one address per shape (so a
    captured CUDA graph replays on the addresses it was captured with), the commit reads its
    cells after them (every session's new token's cell, the padding row's the scratch cell),
    and the tokens stay those of ort-cpu."""
    cpu = Executor.load(tiny_artifact, max_sessions=4)
    texts = prompts(3, seed=6)
    alone = [run_alone(cpu, p, GREEDY, seed=1, steps=5) for p in texts]
    backend = host_backend(tiny_artifact, 4)
    device, uploads, commits = backend.device, [], []
    upload, commit = device.upload, device.commit
    device.upload = lambda buffer, host: (uploads.append(buffer.ptr), upload(buffer, host))
    device.commit = lambda table, pairs, cells, count, widest: (
        commits.append((cells, device._bytes(cells, 8 * count).view(np.int64).tolist())),
        commit(table, pairs, cells, count, widest))
    bound = Executor.load(tiny_artifact, backend=backend, max_sessions=4)
    engine = bound.target.engine
    sids, firsts = prefill(bound, texts, GREEDY, [1] * len(texts))
    produced, addresses = [[token] for token in firsts], []
    for _ in range(4):
        uploads.clear()
        commits.clear()
        for tokens, (token,) in zip(produced, decode(bound, sids, [p[-1] for p in produced], 1)):
            tokens.append(token)
        assert uploads == [engine.arena.ptr]
        ((address, cells),) = commits
        assert engine.arena.ptr < address < engine.arena.ptr + engine.arena.nbytes
        assert cells == [int(bound.cache.cells_of(s)[-1]) for s in sids] + \
            [bound.cache.scratch_cell]
        addresses.append({name: value[1] for (name, is_input), value
                          in engine.main.current.bound.items() if is_input})
    assert produced == alone
    staged = {"tokens", "positions", "cell_table", "attn_mask", "logits_rows"}
    arena = range(engine.arena.ptr, engine.arena.ptr + engine.arena.nbytes)
    assert staged <= set(addresses[0]) and all(addresses[0][n] in arena for n in staged)
    assert addresses[1:] == addresses[:1] * 3  # the same shape: the same addresses


def device_commit(device, seed: int) -> dict[str, np.ndarray]:
    """A run's commit of two pools of different row sizes in one call (a verify's: its keys
    and values, rows of 3 float16 x 8 = 48 bytes, two pairs; its taps, rows of 3 bytes, one
    pair) through the backend's commit table, the cells in an arena after other bytes: every
    pool's bytes after the commit, by name, and numpy's indexing of the same rows."""
    rng = np.random.default_rng(seed)
    count, max_cells = 5, 12
    kv = ort_device.DevicePools(device, max_cells, [("k_pool.0", "k_new.0"),
                                                    ("v_pool.0", "v_new.0")], 24, 2)
    taps = ort_device.DevicePools(device, max_cells, [("taps_pool", "taps")], 3, 1)
    news = {"k_new.0": rng.normal(size=(count, 24)).astype(np.float16),
            "v_new.0": rng.normal(size=(count, 24)).astype(np.float16),
            "taps": rng.integers(0, 255, (count, 3)).astype(np.uint8)}
    engine = SimpleNamespace(buffers={})
    for name, rows in news.items():
        engine.buffers[name] = device.alloc(rows.nbytes)
        device.upload(engine.buffers[name], rows)
    cells = rng.permutation(max_cells)[:count].astype(np.int64)
    arena = device.alloc(64 + cells.nbytes)
    device.upload(arena, np.concatenate([np.full(8, -1, np.int64), cells]))
    before = {}
    for pools in (kv, taps):
        for name in pools.names:
            rows = rng.integers(0, 255, (max_cells, pools.row_bytes)).astype(np.uint8)
            device.upload(pools.buffers[name], rows)
            before[name] = rows
    table = ort_device._CommitTable(device, engine, [kv, taps])
    assert (table.pairs, table.widest) == (3, 48)
    device.commit(table.buffer, table.pairs, arena.ptr + 64, count, table.widest)
    device.synchronize()
    got, expected = {}, {}
    for pools in (kv, taps):
        for name, new in zip(pools.names, pools.new_names):
            got[name] = np.empty((max_cells, pools.row_bytes), np.uint8)
            device.download(got[name], pools.buffers[name])
            expected[name] = before[name].copy()
            expected[name][cells] = news[new].view(np.uint8).reshape(count, -1)
    return {"got": got, "expected": expected}


@pytest.mark.parametrize("seed", range(3))
def test_one_commit_writes_pools_of_different_row_sizes(seed):
    """HostDevice's commit of a table of three pairs, two row sizes: every pool's rows those
    numpy's indexing writes, the cells not committed left as they were."""
    result = device_commit(HostDevice(), seed)
    for name, expected in result["expected"].items():
        np.testing.assert_array_equal(result["got"][name], expected, err_msg=name)


def test_staged_feeds_are_packed_byte_for_byte_whatever_their_dtype():
    """A step's feeds go into the arena as their bytes, flat: through a memoryview where the
    buffer protocol exports the dtype, numpy's uint8 view where it does not (bfloat16), and
    an array whose size-1 dim has a stride of 0 (a broadcast made contiguous by numpy's flags)
    as well."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    arena = memoryview(np.zeros(256, np.uint8))
    zero_stride = np.lib.stride_tricks.as_strided(np.arange(3, dtype=np.int64), (1, 3), (0, 8))
    arrays = [np.arange(5, dtype=np.int64).reshape(1, 5), np.eye(3, dtype=bool)[None, None],
              np.array([1.5, -2.25], np.float16), np.array([[0.5, 3.0]], np.float32),
              np.array([1.0, -0.5, 2.0], ml_dtypes.bfloat16), zero_stride]
    for array in arrays:
        assert array.flags.c_contiguous
        packed = device_engine._flat_bytes(array)
        arena[: array.nbytes] = packed
        assert bytes(arena[: array.nbytes]) == array.tobytes(), array.dtype


def test_host_device_finds_the_buffer_holding_an_address_range():
    """HostDevice resolves an address range to the one buffer that holds it whole (the one
    at the highest address not above it), and refuses a range no buffer holds."""
    device = HostDevice()
    buffers = [device.alloc(n) for n in (64, 1, 200, 64)]
    for k, buffer in enumerate(buffers):
        device.upload(buffer, np.full(buffer.nbytes, k + 1, np.uint8))
    for k, buffer in enumerate(buffers):
        got = np.zeros(buffer.nbytes, np.uint8)
        device.download(got, buffer)
        assert got.tolist() == [k + 1] * buffer.nbytes
    last = buffers[2]
    assert device._bytes(last.ptr + 199, 1).tolist() == [3]
    assert device._bytes(last.ptr + 10, 0).size == 0
    lowest = min(b.ptr for b in buffers)
    for ptr, nbytes in ((last.ptr + 150, 51), (lowest - 1, 1), (last.ptr + 200, 1 << 40)):
        with pytest.raises(AssertionError, match="is in no buffer"):
            device._bytes(ptr, nbytes)


class CapturingDevice(HostDevice):
    """HostDevice with CudaDevice.capture's contract: `capture(work)` runs nothing and gives a
    graph whose launch does what `work` queued, on the addresses bound when it was captured
    (checked at each launch: a CUDA graph replays those whatever is bound since). `refuse`:
    every capture fails, as one of something a graph cannot hold does."""

    captures = True

    def __init__(self, refuse: bool = False) -> None:
        super().__init__()
        self.refuse = refuse
        self.captured: list[tuple] = []  # (engine path, graph key) of each capture, in order
        self.launches = 0
        # the engine whose run is being captured and its graph key (set by the test's hook)
        self.engine, self.key = None, None

    def capture(self, work):
        if self.refuse:
            return None
        engine = self.engine
        current = engine.active.current
        bound = dict(current.bound)
        self.captured.append((engine.path.name, self.key))
        device = self

        class Graph:
            def launch(self):
                assert engine.active.current is current and current.bound == bound
                device.launches += 1
                work()

        return Graph()


def own_graph_backend(artifact, device, monkeypatch, max_sessions=4):
    """host_backend on `device`, its runs queued in order as ort-cuda's with CellAttention,
    its engines replaying their own graphs (CELLSPEC_CUDA_GRAPHS=own); every ONNX Runtime run
    recorded as (engine path, graph key or None where dynamic, captured or not)."""
    monkeypatch.setenv("CELLSPEC_CUDA_GRAPHS", "own")
    manifest = Manifest.load(artifact)
    backend = OrtDeviceBackend("ort-host", device, ["CPUExecutionProvider"],
                               device_limits(manifest, max_sessions), device_policy(manifest),
                               artifact / manifest.graphs["sample"], "decomposed")
    backend.in_order = True
    runs: list[tuple] = []
    run, own = device_engine.DeviceEngine.run, device_engine.DeviceEngine._run_own

    def recorded_run(self, graph_key):
        device.engine, device.key = self, graph_key
        runs.append((self.path.name, graph_key))
        return run(self, graph_key)

    monkeypatch.setattr(device_engine.DeviceEngine, "run", recorded_run)
    monkeypatch.setattr(device_engine.DeviceEngine, "_run_own", own)
    return backend, runs


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_own_graphs_replay_static_steps_and_keep_the_tokens(dflash_artifact, sampling,
                                                            monkeypatch):
    """CELLSPEC_CUDA_GRAPHS=own: each static step's third run of a binding is captured (the two
    before run uncaptured, as ONNX Runtime warms its memory up) and every later one launches
    that graph on the addresses it was captured with; dynamic steps never are. Speculation
    over it gives plain ort-cpu's tokens, greedy and seeded."""
    plain = Executor.load(dflash_artifact, max_sessions=4)
    texts = prompts(3, seed=5)
    expected = [run_alone(plain, p, sampling, seed=7 + i, steps=16) for i, p in enumerate(texts)]
    device = CapturingDevice()
    backend, runs = own_graph_backend(dflash_artifact, device, monkeypatch)
    spec = DFlashExecutor.load(dflash_artifact, backend=backend, max_sessions=4)
    sids = [spec.open_session() for _ in texts]
    for i, sid in enumerate(sids):
        spec.set_sampling(sid, sampling, 7 + i)
    assert spec_decode(spec, sids, texts, 14) == [e[:14] for e in expected]
    assert spec.stats.cycles > 0 and device.captured and device.launches
    # every static key run three times or more was captured at its third run, once, and
    # launched at that run (a capture runs nothing) and every one after; those run fewer
    # times were not; dynamic ones never
    counts = Counter(run for run in runs if run[1] is not None)
    assert sorted(device.captured) == sorted(run for run, n in counts.items() if n >= 3)
    assert device.launches == sum(n - 2 for run, n in counts.items() if n >= 3)
    assert counts and all(run[1] is None or run in counts for run in runs)


def test_a_refused_capture_runs_the_step_as_before(dflash_artifact, monkeypatch):
    """A capture that fails (something in the run a graph cannot hold) leaves the step to ONNX
    Runtime's own graph: captured once, never launched, and the tokens are ort-cpu's."""
    plain = Executor.load(dflash_artifact, max_sessions=4)
    texts = prompts(2, seed=8)
    expected = [run_alone(plain, p, GREEDY, seed=1, steps=12) for p in texts]
    device = CapturingDevice(refuse=True)
    attempts = []
    capture = device.capture
    device.capture = lambda work: attempts.append(device.key) or capture(work)
    backend, runs = own_graph_backend(dflash_artifact, device, monkeypatch)
    spec = DFlashExecutor.load(dflash_artifact, backend=backend, max_sessions=4)
    sids = [spec.open_session() for _ in texts]
    for sid in sids:
        spec.set_sampling(sid, GREEDY, 1)
    assert spec_decode(spec, sids, texts, 12) == [e[:12] for e in expected]
    assert attempts and len(set(attempts)) == len(attempts) and device.launches == 0


def test_a_changed_binding_is_captured_again_then_left_to_onnx_runtime(tiny_artifact,
                                                                      monkeypatch):
    """A static step whose binding changed since its capture (an address bound anew) is not
    launched on the old addresses: it warms up and is captured again, up to MAX_CAPTURES
    times, after which it runs as ONNX Runtime's own graph."""
    device = CapturingDevice()
    backend, runs = own_graph_backend(tiny_artifact, device, monkeypatch)
    cpu = Executor.load(tiny_artifact, max_sessions=4)
    texts = prompts(2, seed=4)
    alone = [run_alone(cpu, p, GREEDY, seed=1, steps=30) for p in texts]
    bound = Executor.load(tiny_artifact, backend=backend, max_sessions=4)
    engine = bound.target.engine
    sids, firsts = prefill(bound, texts, GREEDY, [1, 1])
    produced = {sid: [token] for sid, token in zip(sids, firsts)}
    limit = device_engine._OwnGraph.MAX_CAPTURES
    launches = []
    for step in range(4 * (limit + 1)):
        if step % 4 == 0:  # a binding changes under the step's key: its version moves on
            engine.main.current.version += 1 if step else 0
        before = device.launches
        for sid, (token,) in zip(sids, decode(bound, sids, [produced[s][-1] for s in sids], 1)):
            produced[sid].append(token)
        launches.append(device.launches - before)
    assert [produced[sid] for sid in sids] == [a[:len(produced[sid])]
                                               for sid, a in zip(sids, alone)]
    keys = [key for name, key in device.captured if name == engine.path.name]
    assert len(keys) == limit and len(set(keys)) == 1
    # each capture: two warm runs, then launches until the binding changes; after the last,
    # ONNX Runtime's own graph (no launch)
    assert launches == [0, 0, 1, 1] * limit + [0, 0, 0, 0]


def test_cuda_graph_modes_are_checked(monkeypatch):
    monkeypatch.setenv("CELLSPEC_CUDA_GRAPHS", "mine")
    with pytest.raises(InvalidArgument, match="CELLSPEC_CUDA_GRAPHS='mine': one of ort, own"):
        ort_device.cuda_graphs()
    monkeypatch.delenv("CELLSPEC_CUDA_GRAPHS")
    assert ort_device.cuda_graphs() == "ort"
