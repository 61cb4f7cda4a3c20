# Stall samples per reason and the top SASS instructions, from `ncu --page source --print-source sass --csv` (bench/probes/ncu_gemm.sh writes that CSV).
# Usage: python3 bench/probes/ncu_stalls.py FILE.sass.csv [top-N]
import csv, sys, collections
f = sys.argv[1]
rows = list(csv.reader(open(f)))
hdr = rows[1]; data = rows[2:]
idx = {h: i for i, h in enumerate(hdr)}
stall_cols = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
tot = collections.Counter(); n = 0
for r in data:
    if len(r) < len(hdr): continue
    for h in stall_cols:
        v = r[idx[h]]
        if v.isdigit(): tot[h] += int(v)
S = sum(tot.values())
print("total samples", S)
for h, v in tot.most_common(12): print(f"  {h:28s} {v:8d} {100*v/S:5.1f}%")
# top instructions
data2 = [r for r in data if len(r) >= len(hdr) and r[2].isdigit()]
data2.sort(key=lambda r: -int(r[2]))
print("top instructions by samples:")
for r in data2[:int(sys.argv[2]) if len(sys.argv) > 2 else 30]:
    top = sorted(((int(r[idx[h]]), h) for h in stall_cols if r[idx[h]].isdigit()), reverse=True)[:3]
    print(f"{r[0][-5:]} {int(r[2]):6d} {r[1].strip()[:60]:60s} {top}")
