"""What the graph rewrites share: the op domains, an emitter of named nodes and constants, the
walk that rewrites each Attention node, and small readers of a graph's nodes and constants."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from cellspec import artifact as names

HALF = (TensorProto.FLOAT16, TensorProto.BFLOAT16)
CONTRIB = "com.microsoft"
CELLSPEC_DOMAIN = "cellspec"
# cellspec's ops are registered once per element type, named op + this suffix
TYPE_SUFFIX = {TensorProto.FLOAT: "Float", TensorProto.FLOAT16: "Float16",
               TensorProto.BFLOAT16: "BFloat16"}
CELL_OPS = {dtype: "CellAttention" + suffix for dtype, suffix in TYPE_SUFFIX.items()}


class Emitter:
    """Makes nodes and constants with names under a prefix (no name clashes with the graph's)."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.constants: dict[str, TensorProto] = {}
        self.replaced: set[str] = set()  # names of nodes whose work emitted nodes took over

    def node(self, op: str, inputs: list[str], name: str, outputs: list[str] | None = None,
             domain: str = "", **attrs) -> str:
        outputs = outputs or [f"{name}_out"]
        self.nodes.append(helper.make_node(op, inputs, outputs, name=name, domain=domain or None,
                                           **attrs))
        return outputs[0]

    def const(self, values, dtype, name: str) -> str:
        if name not in self.constants:
            self.constants[name] = numpy_helper.from_array(np.asarray(values, dtype=dtype), name)
        return name


def rewrite_attention(model: onnx.ModelProto, rewrite) -> onnx.ModelProto:
    """`model` with each Attention node replaced by what `rewrite(emitter, node, producers)`
    emits; nodes the emitter marks replaced, and nodes left dead, go."""
    emitter = Emitter()
    producers = {out: node for node in model.graph.node for out in node.output}
    nodes = []
    for node in model.graph.node:
        if node.op_type == "Attention" and node.domain in ("", "ai.onnx"):
            start = len(emitter.nodes)
            rewrite(emitter, node, producers)
            nodes += emitter.nodes[start:]
        else:
            nodes.append(node)
    nodes = [node for node in nodes if node.name not in emitter.replaced]
    result = onnx.ModelProto()
    result.CopyFrom(model)
    del result.graph.node[:]
    result.graph.node.extend(live_nodes(nodes, {o.name for o in model.graph.output}))
    result.graph.initializer.extend(emitter.constants.values())
    return result


def live_nodes(nodes: list[onnx.NodeProto], outputs: set[str]) -> list[onnx.NodeProto]:
    """The nodes some graph output depends on, in order (a rewrite can leave Concats dead)."""
    needed, live = set(outputs), []
    for node in reversed(nodes):
        if any(out in needed for out in node.output):
            live.append(node)
            needed.update(i for i in node.input if i)
    return live[::-1]


def node_attributes(node: onnx.NodeProto) -> dict:
    """The node's attributes by name, as Python values."""
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def constant_values(name: str, initializers: dict) -> list | None:
    """The values of initializer `name`, flattened, or None when it is not one."""
    found = initializers.get(name)
    return None if found is None else numpy_helper.to_array(found).reshape(-1).tolist()


def import_domain(model: onnx.ModelProto, domain: str) -> None:
    """Version 1 of `domain` among the model's opset imports, unless it is there already."""
    if not any(o.domain == domain for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(domain, 1))


def slice_of(name: str, producers: dict, initializers: dict) -> tuple[str, int, int] | None:
    """(x, start, end) when `name` is Slice(x, [start], [end], [-1]) (no steps)."""
    node = producers.get(name)
    if node is None or node.op_type != "Slice" or len(node.input) != 4:
        return None
    start, end, axes = (constant_values(i, initializers) for i in node.input[1:])
    if axes != [-1] or start is None or end is None or len(start) != 1 or len(end) != 1:
        return None
    return node.input[0], start[0], end[0]


def gathered_past(node: onnx.NodeProto, producers: dict) -> tuple[str, str, str, str] | None:
    """(gathered keys [S, N, KV*D], new keys, gathered values, new values) when the node's k and
    v are Concat(Gather(pool, cell_table), new) on axis 1, as the target graph makes them."""
    found = []
    for name in node.input[1:3]:
        concat = producers.get(name)
        if concat is None or concat.op_type != "Concat" or len(concat.input) != 2:
            return None
        gather = producers.get(concat.input[0])
        if gather is None or gather.op_type != "Gather" or gather.input[1] != "cell_table":
            return None
        found += [concat.input[0], concat.input[1]]
    return tuple(found)


def activation_type(model: onnx.ModelProto) -> int | None:
    """The model dtype: the element type of its KV pools (k_pool.0), None without pools."""
    pools = [v for v in model.graph.input if v.name.startswith("k_pool.")]
    return pools[0].type.tensor_type.elem_type if pools else None


def without_tree_choices(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` without draft_block's tree outputs (top_ids, top_logp) and the nodes only they
    need, for a backend that verifies chains only (Backend.exact_trees: `ort-cpu`, `ort-cuda`
    without CellAttention): ONNX Runtime computes every output whether a run asks for it or
    not (a LogSoftmax and a TopK over every row read out: about 0.3 ms a block on the CPU).
    Other graphs are returned as they are."""
    tree = {names.TOP_IDS, names.TOP_LOGP}
    if not tree & {o.name for o in model.graph.output}:
        return model
    result = onnx.ModelProto()
    result.CopyFrom(model)
    kept = [o for o in result.graph.output if o.name not in tree]
    del result.graph.output[:]
    result.graph.output.extend(kept)
    nodes = live_nodes(list(result.graph.node), {o.name for o in kept})
    del result.graph.node[:]
    result.graph.node.extend(nodes)
    return result
