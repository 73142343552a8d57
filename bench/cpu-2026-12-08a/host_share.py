# Plain int4 decoding at batch 1: wall time per token against the time inside InferenceSession.run (256 tokens), then a cProfile.
# python bench/cpu-2026-12-08a/host_share.py ARTIFACT
import cProfile, pstats, time, sys
import onnxruntime as ort
from cellspec import LLM, SamplingParams
art = sys.argv[1]
llm = LLM(art, speculation=False, chat=False)
sp = SamplingParams(max_tokens=256, temperature=0.0, ignore_eos=True)
prompt = "The history of the city of Paris begins"
llm.generate([prompt], sp)
# time spent inside InferenceSession.run
orig = ort.InferenceSession.run
acc = [0.0, 0]
def run(self, *a, **k):
    t = time.perf_counter(); r = orig(self, *a, **k); acc[0] += time.perf_counter() - t; acc[1] += 1; return r
ort.InferenceSession.run = run
t = time.perf_counter(); out = llm.generate([prompt], sp); wall = time.perf_counter() - t
print(f"wall {wall*1e3:.0f} ms for 256 tokens: {wall/256*1e3:.2f} ms/token; session.run {acc[0]/256*1e3:.2f} ms/token in {acc[1]} calls")
pr = cProfile.Profile(); pr.enable(); llm.generate([prompt], sp); pr.disable()
st = pstats.Stats(pr); st.sort_stats('tottime').print_stats(18)
