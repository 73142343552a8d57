# 2026-12-06 (ninth sitting), call 2: four more pairs, then shapes A and B one `execute` a step
# against chains of 16 (the plugin cached by call 1).
RUNS="pinned2 free2 pinned3 free3" bash bench/gpu-2026-12-06c/2-pinned-pairs.sh; bash bench/gpu-2026-12-06c/1-chained-steps.sh
