"""Rewrites of the attention (and the projections, the sampler's sorts and sums) in an exported
graph for a provider that runs it another way: `graph.py` what they share, `attention.py` the
decomposed, grouped and by-position forms, `cell.py` CellAttention and SwiGlu, `kernels.py`
the sampler's sorts and sums and the projections.

Both sides use it: the exporter (a TensorRT build parses standard ops) and the runtime (ONNX
Runtime's CUDA provider takes opset-23 `Attention` only in forms it has kernels for). A rewrite
returns a new in-memory model with the same inputs, outputs and initializers (initializers that
live in weights.bin stay references to it); only Attention nodes (and the nodes feeding them
that the new form makes dead) change, or in `sampling_for_cuda` CumSum and TopK nodes, or in
`projections_for_cuda` MatMul and Gemm nodes.

- `decompose_attention`: every Attention becomes standard ops: q as [S, KV, G, Q, D] (query
  head h reads kv head h // G, as transformers' repeat_kv), k/v as [S, KV, 1, ., D], scores in
  float32, Where(mask, scores, -inf), Softmax, Where(mask, probs, 0), MatMul, back to
  [S, Q, H * D]. Any provider runs it; it costs about fifteen nodes per attention.
- `attention_for_cuda`: ONNX Runtime's CUDA `GroupQueryAttention` (com.microsoft; flash or
  memory-efficient attention, float16/bfloat16, causal) takes a right-padded past
  [S, KV, T, D] with each row's valid length in `seqlens_k` (a device tensor: a captured CUDA
  graph replays it as it changes) and writes the Q new tokens after it, in place when the
  present has the past's shape. The target's causal attention over [cell_table cells ; new
  tokens] is exactly that with [cells ; new tokens] (T = N + Q) as the past: such nodes become
  GroupQueryAttention reading two new graph inputs the runtime
  feeds when a graph has them, `attn_seqlens [S]` int32 (lengths[s] + Q - 1) and `attn_total`
  int32 scalar (N + Q, in host memory, as the op wants it). The others (float32 inputs, sliding
  windows, the draft's non-causal blocks) are decomposed. (The opset-23 Attention's own CUDA
  grouped path reads a bool mask back to the host, which a CUDA graph cannot capture.)
- `attention_by_position` (`ort-cpu`, a target with a draft): its Attention over
  Concat(Gather(pool, cell_table), new) reads ScatterND(Gather(pool, cell_table), new_columns, new)
  instead, every key at the column of its position whether it is a cell or new in this step, plus
  one dummy query row that is dropped after. ONNX Runtime's CPU Attention sums keys in SIMD lanes
  fixed by their columns and rounds a query alone in its step another way
  (tests/runtime/test_cpu_attention_premises.py); in this form a token's logits are the same bit for
  bit whether it is fed in a verify or a later step, so speculation cannot change the text. The
  runtime feeds it through `by_position_feeds`.
- `cell_attention_for_cuda`: each Attention over Concat(Gather(pool, cell_table), new) becomes
  cellspec's own `CellAttention*` (domain "cellspec", cellspec/plugins/cell_attention.cu), which
  reads the cells where they lie in the pools: one node for the five, whose rounding depends on
  neither the batch, the cell bucket, nor (in the target, `by_position`) whether a key is new or
  a cell already. Attention in other forms is decomposed.
- `projections_for_cuda`: each float16/bfloat16 MatMul by a weight initializer, and the tied LM
  head's Gemm, as cellspec's `RowMatMul` (cellspec/plugins/cell_attention.cu): on the tensor
  cores for any number of rows, a row's rounding independent of the others, where cuBLAS took
  3.7 us per small GEMM on the H200 whatever its size and rounded a row by its batch. A
  MatMul's [K, N] weight is read through nodes that ONNX Runtime folds into a new initializer
  at load: tiled [N / 8, K / 32, 8, 32] where it fits (`rotary_row_order` for the qkv's rows
  first; gate and up side by side for a SwiGlu), so that the kernel's loads are contiguous,
  else a Transpose to [N, K]. A SwiGlu of a RowMatMul's product becomes one
  `RowMatMulSwiGlu`, and a `CellRotaryAttention` of one `RowMatMulRotary` (the rotation in the
  projection's epilogue) + `CellAttention`.
- `sampling_for_cuda`: the sampler and verifier graphs' full sort and cumulative sums on
  cellspec's ops. Each float32 CumSum along the last axis becomes `SequentialCumSumFloat`: the
  same float32 sums, one add at a time in index order, in time linear in the axis where the CUDA
  provider's CumSum is quadratic (each output summed from the start); where the sums are read
  only by the sampler's top-p rule, `SequentialCumSumUntilFloat(x, top_p)`, which stops a row
  after the 2,048-wide tile where the exclusive sum reaches top_p and writes +inf past it (the
  rule reads no sum there). Each float32 TopK of a
  whole last axis (largest, sorted) becomes `SortDescendingFloat`: the same order, every row in
  one stable radix sort where the CUDA provider sorts one row at a time.
- `top_choices_for_cuda`: draft_block's tree choices, a TopK (k at most 8) of a float32
  LogSoftmax along the last axis, as one `TopLogSoftmaxFloat`: a block a row finds the row's k
  largest (TopK's order and ties) and their log-softmax, where the CUDA provider took several
  kernels for the LogSoftmax and the TopK (about 17 us more a draft block on the H200).
"""

from cellspec.rewrite.attention import (
    ATTN_SEQLENS,
    ATTN_TOTAL,
    HOST_INPUTS,
    NEW_COLUMNS,
    attention_by_position,
    attention_for_cuda,
    by_position_feeds,
    decompose_attention,
    grouped_feeds,
)
from cellspec.rewrite.cell import MAX_CELL_HEAD_DIM, cell_attention_for_cuda
from cellspec.rewrite.graph import CELL_OPS, CELLSPEC_DOMAIN, CONTRIB
from cellspec.rewrite.kernels import (
    ROW_MATMUL,
    SEQUENTIAL_CUMSUM,
    SEQUENTIAL_CUMSUM_UNTIL,
    SORT_DESCENDING,
    TOP_LOG_SOFTMAX,
    projections_for_cuda,
    sampling_for_cuda,
    top_choices_for_cuda,
)

__all__ = ["ATTN_SEQLENS", "ATTN_TOTAL", "CELLSPEC_DOMAIN", "CELL_OPS", "CONTRIB", "HOST_INPUTS",
           "MAX_CELL_HEAD_DIM", "NEW_COLUMNS", "ROW_MATMUL", "SEQUENTIAL_CUMSUM",
           "SEQUENTIAL_CUMSUM_UNTIL", "SORT_DESCENDING", "TOP_LOG_SOFTMAX",
           "attention_by_position", "attention_for_cuda", "by_position_feeds",
           "cell_attention_for_cuda", "decompose_attention", "grouped_feeds",
           "projections_for_cuda", "sampling_for_cuda", "top_choices_for_cuda"]
