"""Teacher-forced top-1 agreement and KL of SmolLM2 (float32, from the bundled GGUF) with its
projections' inputs and weights rounded per form (bench/NOTES.md, twenty-fifth sitting).

    python bench/cpu-2026-12-07m/int8_quality.py [TOKENIZER_JSON]   # torch + transformers
"""
import sys, pathlib, torch, transformers, numpy as np
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from cellspec.export.gguf import find_bundled_gguf
from tokenizers import Tokenizer
torch.set_num_threads(2)
g = find_bundled_gguf()
model = transformers.AutoModelForCausalLM.from_pretrained(g.parent, gguf_file=g.name, dtype=torch.float32, attn_implementation="eager").eval()
tok = Tokenizer.from_file(sys.argv[1] if len(sys.argv) > 1 else "/tmp/cs4/tokenizer.json")
prompts = ["<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
 "<|im_start|>user\nWrite a short poem about the sea.<|im_end|>\n<|im_start|>assistant\n",
 "<|im_start|>user\nExplain how a refrigerator works.<|im_end|>\n<|im_start|>assistant\n",
 "def fibonacci(n):\n    ", "The history of the Roman Empire",
 "<|im_start|>user\nGive me three tips for learning a new language.<|im_end|>\n<|im_start|>assistant\n"]
seqs = []
with torch.no_grad():
    for p in prompts:
        ids = torch.tensor([tok.encode(p, add_special_tokens=False).ids])
        out = model.generate(ids, max_new_tokens=96, do_sample=False)
        seqs.append(out)
orig = {n: m.weight.data.clone() for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
def ref_logits():
    with torch.no_grad():
        return [model(s).logits[0].float() for s in seqs]
base = ref_logits()
def qa_row(x):  # per-row symmetric int8
    s = x.abs().amax(-1, keepdim=True) / 127; s = torch.where(s > 0, s, torch.ones_like(s))
    return torch.round(x / s) * s
def qa_blk(x, b=32):
    sh = x.shape; xb = x.reshape(*sh[:-1], sh[-1] // b, b)
    s = xb.abs().amax(-1, keepdim=True) / 127; s = torch.where(s > 0, s, torch.ones_like(s))
    return (torch.round(xb / s) * s).reshape(sh)
def qw_chan(w, bits):
    qm = 2 ** (bits - 1) - 1
    s = w.abs().amax(1, keepdim=True) / qm
    return torch.round(w / s) * s
def run(name, aq, wbits, head):
    for n, m in model.named_modules():
        if isinstance(m, torch.nn.Linear):
            if n == "lm_head" and not head: m.weight.data = orig[n]; m.forward = torch.nn.Linear.forward.__get__(m); continue
            m.weight.data = qw_chan(orig[n], wbits) if wbits else orig[n]
            def f(x, m=m): return torch.nn.functional.linear(aq(x), m.weight, m.bias)
            m.forward = f
    ls = ref_logits()
    agree = tot = 0; kl = 0.0
    for a, b in zip(base, ls):
        agree += (a.argmax(-1) == b.argmax(-1)).sum().item(); tot += len(a)
        kl += torch.nn.functional.kl_div(b.log_softmax(-1), a.log_softmax(-1), log_target=True, reduction="sum").item()
    print(f"{name:40s} top1 agree {agree}/{tot} = {agree/tot:.4f}  mean KL {kl/tot:.5f}", flush=True)
run("A8 blk32, exact W (int4 L4-like)", qa_blk, 0, False)
run("A8 row, W8 chan", qa_row, 8, False)
run("A8 row, W7 chan", qa_row, 7, False)
run("A8 row, W7 chan, head too", qa_row, 7, True)
run("A8 row, exact W", qa_row, 0, False)
# SmoothQuant: per-input-channel factors from calibration prompts (not the evaluated ones)
calib_prompts = ["<|im_start|>user\nHow do plants make food?<|im_end|>\n<|im_start|>assistant\n",
                 "import numpy as np\n\ndef mean(xs):", "Once upon a time, in a small village,"]
for n, m in model.named_modules():
    if isinstance(m, torch.nn.Linear):
        m.weight.data = orig[n]; m.forward = torch.nn.Linear.forward.__get__(m)
amax = {}
hooks = [m.register_forward_hook(lambda mod, inp, out, n=n: amax.__setitem__(n, torch.maximum(amax.get(n, torch.zeros(inp[0].shape[-1])), inp[0].abs().reshape(-1, inp[0].shape[-1]).amax(0))))
         for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
with torch.no_grad():
    for p in calib_prompts:
        ids = torch.tensor([tok.encode(p, add_special_tokens=False).ids]); model.generate(ids, max_new_tokens=96, do_sample=False)
for h in hooks: h.remove()
def run_sq(alpha, wbits=8):
    for n, m in model.named_modules():
        if isinstance(m, torch.nn.Linear):
            if n == "lm_head": m.weight.data = orig[n]; m.forward = torch.nn.Linear.forward.__get__(m); continue
            s = (amax[n].clamp(min=1e-5) ** alpha / orig[n].abs().amax(0).clamp(min=1e-5) ** (1 - alpha))
            m.weight.data = qw_chan(orig[n] * s, wbits)
            def f(x, m=m, s=s): return torch.nn.functional.linear(qa_row(x / s), m.weight, m.bias)
            m.forward = f
    ls = ref_logits(); agree = tot = 0; kl = 0.0
    for a, b in zip(base, ls):
        agree += (a.argmax(-1) == b.argmax(-1)).sum().item(); tot += len(a)
        kl += torch.nn.functional.kl_div(b.log_softmax(-1), a.log_softmax(-1), log_target=True, reduction="sum").item()
    print(f"SmoothQuant alpha {alpha} W{wbits}                  top1 agree {agree}/{tot} = {agree/tot:.4f}  mean KL {kl/tot:.5f}", flush=True)
for a in (0.3, 0.4, 0.5, 0.7): run_sq(a)
run_sq(0.5, 7)
