import json, sys
for r in json.load(open(sys.argv[1])):
    print(f"{r['shape']} batch {r['batch']} width {r['width']}: wall {r['wall_ms']:.3f} ms, "
          f"kernels {r['kernel_ms']:.3f} ms, {r['launches']:.0f} launches")
    for k in r["top"][:8]:
        name = k["kernel"].replace("void ", "").replace("(anonymous namespace)::", "")
        print(f"    {k['us']:8.1f} us  x{k['per_step']:.0f}  {name.split('(')[0][:80]}")
